#include "trainers/model_file.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "core/io/env.h"
#include "nn/model/config_json.h"
#include "nn/model/model.h"

namespace troupe::trainers {
namespace {

constexpr char kFormat[] = "troupe-model";
// What model files said before there was more than one architecture: read as the same format.
constexpr char kFormatBefore[] = "troupe-gpt";
constexpr int kVersion = 1;

// Every file of a model is written as the checkpoints' are: beside itself, synced, renamed.
absl::Status write_file(const std::string& path, const void* data, size_t n) {
  return io::write_file_atomically(io::Env::posix(), path, data, n);
}

}  // namespace

std::string partition_file_name(size_t r, size_t n) {
  return absl::StrCat("model.part-", r, "-of-", n, ".bin");
}

absl::Status save_model(const std::string& dir, const SavedModel& saved) {
  if (absl::Status s = saved.model.validate(); !s.ok()) return s;
  const nn::ModelLayout layout = nn::model_layout(saved.model);
  if (saved.params.size() != layout.num_params()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "save_model: ", saved.params.size(), " parameters for a model of ", layout.num_params()));
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat(dir, ": ", ec.message()));
  nlohmann::json header = {{"format", kFormat},
                           {"version", kVersion},
                           {"dtype", "float32"},
                           {"num_params", saved.params.size()},
                           {"model", nlohmann::json::parse(nn::model_config_to_text(saved.model))},
                           {"step", saved.step},
                           {"tokenizer", saved.tokenizer}};
  if (saved.partitions.empty()) {
    if (absl::Status s = write_file(dir + "/model.bin", saved.params.data(),
                                    saved.params.size() * sizeof(float));
        !s.ok()) {
      return s;
    }
  } else {
    size_t total = 0;
    for (size_t n : saved.partitions)
      total += n;
    if (total != saved.params.size()) {
      return absl::InvalidArgumentError(absl::StrCat("save_model: partitions of ", total,
                                                     " parameters for ", saved.params.size()));
    }
    header["partitions"] = saved.partitions;
    size_t at = 0;
    for (size_t r = 0; r < saved.partitions.size(); ++r) {
      const std::string path = dir + "/" + partition_file_name(r, saved.partitions.size());
      if (absl::Status s =
              write_file(path, saved.params.data() + at, saved.partitions[r] * sizeof(float));
          !s.ok()) {
        return s;
      }
      at += saved.partitions[r];
    }
  }
  std::string text = header.dump(2) + "\n";
  return write_file(dir + "/model.json", text.data(), text.size());
}

absl::StatusOr<std::pair<SavedModel, size_t>> parse_model_header(const std::string& text,
                                                                 const std::string& where) {
  if (text.size() > kMaxModelHeaderBytes) {
    return absl::DataLossError(
        absl::StrCat(where, ": larger than ", kMaxModelHeaderBytes, " bytes; not a model header"));
  }
  SavedModel saved;
  size_t num_params = 0;
  try {
    nlohmann::json h = nlohmann::json::parse(text);
    const bool ours = h.at("format") == kFormat || h.at("format") == kFormatBefore;
    if (!ours || h.at("version") != kVersion || h.at("dtype") != "float32") {
      return absl::DataLossError(
          absl::StrCat(where, ": not a troupe-model version ", kVersion, " float32 model"));
    }
    absl::StatusOr<nn::ModelConfig> model = nn::model_config_from_json(h.at("model"), "model");
    if (!model.ok()) {
      return absl::DataLossError(absl::StrCat(where, ": ", model.status().message()));
    }
    saved.model = *std::move(model);
    saved.step = h.value("step", int64_t{0});
    saved.tokenizer = h.value("tokenizer", std::string("bytes"));
    num_params = h.at("num_params").get<size_t>();
    if (h.contains("partitions")) saved.partitions = h["partitions"].get<std::vector<size_t>>();
  } catch (const nlohmann::json::exception& e) {
    return absl::DataLossError(absl::StrCat(where, ": ", e.what()));
  }
  const nn::ModelConfig& model = saved.model;
  struct Bound {
    const char* what;
    int value, max;
  };
  for (const Bound& b : {Bound{"layers", model.num_layers(), kMaxLayers},
                         Bound{"heads", model.num_heads(), kMaxHeads},
                         Bound{"hidden size", model.hidden_size(), kMaxChannels},
                         Bound{"sequence length", model.max_seq_len(), kMaxSeqLen},
                         Bound{"padded vocabulary", model.padded_vocab(), kMaxVocab}}) {
    if (b.value > b.max) {
      return absl::DataLossError(
          absl::StrCat(where, ": model: ", b.value, " ", b.what, " is outside [1, ", b.max, "]"));
    }
  }
  if (nn::model_layout(model).num_params() != num_params) {
    return absl::DataLossError(
        absl::StrCat(where, ": num_params ", num_params, " does not match the model"));
  }
  if (!saved.partitions.empty()) {
    size_t total = 0;
    for (size_t n : saved.partitions)
      total += n;
    if (total != num_params || saved.partitions.size() > 4096) {
      return absl::DataLossError(absl::StrCat(where, ": ", saved.partitions.size(),
                                              " partitions of ", total,
                                              " parameters; num_params is ", num_params));
    }
  }
  return std::pair{std::move(saved), num_params};
}

absl::StatusOr<SavedModel> load_model(const std::string& dir) {
  const std::string json_path = dir + "/model.json";
  const std::string bin_path = dir + "/model.bin";
  std::ifstream json_file(json_path);
  if (!json_file) return absl::NotFoundError(absl::StrCat(json_path, ": cannot be read"));
  std::string text(kMaxModelHeaderBytes + 1, '\0');
  json_file.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(json_file.gcount()));  // one byte too many is refused below
  absl::StatusOr<std::pair<SavedModel, size_t>> header = parse_model_header(text, json_path);
  if (!header.ok()) return header.status();
  SavedModel saved = std::move(header->first);
  const size_t num_params = header->second;
  // One file, or the ranks' partitions in order.
  std::vector<std::pair<std::string, size_t>> files;
  if (saved.partitions.empty()) {
    files.emplace_back(bin_path, num_params);
  } else {
    for (size_t r = 0; r < saved.partitions.size(); ++r) {
      files.emplace_back(dir + "/" + partition_file_name(r, saved.partitions.size()),
                         saved.partitions[r]);
    }
  }
  saved.params.resize(num_params);
  size_t at = 0;
  for (const auto& [path, count] : files) {
    std::ifstream bin(path, std::ios::binary | std::ios::ate);
    if (!bin) return absl::NotFoundError(absl::StrCat(path, ": cannot be read"));
    if (static_cast<size_t>(bin.tellg()) != count * sizeof(float)) {
      return absl::DataLossError(absl::StrCat(path, ": ", static_cast<int64_t>(bin.tellg()),
                                              " bytes, expected ", count * sizeof(float)));
    }
    bin.seekg(0);
    bin.read(reinterpret_cast<char*>(saved.params.data() + at),
             static_cast<std::streamsize>(count * sizeof(float)));
    if (!bin) return absl::DataLossError(absl::StrCat(path, ": short read"));
    at += count;
  }
  for (size_t i = 0; i < saved.params.size(); ++i) {
    if (!std::isfinite(saved.params[i])) {
      return absl::DataLossError(
          absl::StrCat(saved.partitions.empty() ? bin_path : dir, ": parameter ", i, " is ",
                       std::isnan(saved.params[i]) ? "NaN" : "infinite",
                       " (the weights of a run that diverged?); refusing to load them"));
    }
  }
  return saved;
}

}  // namespace troupe::trainers
