#include "trainers/config.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <variant>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace troupe::trainers {

int default_padded_vocab(int vocab_size) {
  return (vocab_size + 63) / 64 * 64;
}

absl::StatusOr<TrainConfig> load_train_config(const std::string& path) {
  std::error_code ec;
  std::filesystem::file_status st = std::filesystem::status(path, ec);
  if (!ec && std::filesystem::is_directory(st)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": is a directory, not a config file"));
  }
  if (!ec && std::filesystem::exists(st) && !std::filesystem::is_regular_file(st)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a regular file (a config is a JSON file)"));
  }
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    return absl::NotFoundError(
        absl::StrCat(path, ": cannot read the config file (", std::strerror(errno), ")"));
  }
  std::string contents;
  char buffer[1 << 16];
  while (file.read(buffer, sizeof(buffer)) || file.gcount() > 0) {
    contents.append(buffer, static_cast<size_t>(file.gcount()));
    if (static_cast<int64_t>(contents.size()) > kMaxConfigBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": larger than ", kMaxConfigBytes >> 20, " MiB; not a config file"));
    }
  }
  if (file.bad()) {
    return absl::NotFoundError(
        absl::StrCat(path, ": cannot read the config file (", std::strerror(errno), ")"));
  }
  absl::StatusOr<TrainConfig> config = parse_train_config(contents);
  if (!config.ok()) {
    return absl::Status(config.status().code(),
                        absl::StrCat(path, ": ", config.status().message()));
  }
  return config;
}

std::optional<std::string> steps_schedule_mismatch(const TrainConfig& config) {
  int total = 0;
  if (const auto* decay = std::get_if<nn::WarmupDecayLrConfig>(&config.scheduler)) {
    total = decay->total_num_steps;
  } else if (const auto* cosine = std::get_if<nn::WarmupCosineLrConfig>(&config.scheduler)) {
    total = cosine->total_num_steps;
  }
  const int64_t steps = config.training.steps;
  if (total <= 0 || steps <= 0 || steps == total) return std::nullopt;
  return absl::StrCat(
      "the run trains ", steps,
      " steps (training.steps or --steps) but the scheduler's "
      "total_num_steps is ",
      total, ": ",
      steps < total
          ? absl::StrCat("the run ends at step ", steps, ", before the rate has decayed")
          : absl::StrCat("the rate has decayed by step ", total,
                         " and stays at its minimum for the last ", steps - total, " steps"),
      "; set scheduler.params.total_num_steps to ", steps, " to decay over the whole run");
}

namespace {

// OK when `path` names a file (llm.c's format) or PATH.bin and PATH.json both exist.
absl::Status check_dataset_exists(const std::string& key, const std::string& path) {
  std::error_code file_error;
  // A file itself: llm.c's format (actors/data/llmc_format.h), checked when opened.
  if (std::filesystem::is_regular_file(path, file_error)) return absl::OkStatus();
  std::vector<std::string> missing;
  for (const char* suffix : {".bin", ".json"}) {
    const std::string file = path + suffix;
    std::error_code error;
    if (!std::filesystem::is_regular_file(file, error)) missing.push_back(file);
  }
  if (missing.empty()) return absl::OkStatus();
  return absl::NotFoundError(absl::StrCat(
      key, ": ", absl::StrJoin(missing, " and "), missing.size() > 1 ? " do" : " does",
      " not exist (a dataset PATH is PATH.bin with its header PATH.json, as `troupe data "
      "prepare` writes them, or an llm.c FILE.bin; relative paths are from the working "
      "directory)"));
}

}  // namespace

absl::Status check_data_exists(const TrainConfig& config) {
  if (!config.data.path.empty()) {
    if (absl::Status s = check_dataset_exists("data.path", config.data.path); !s.ok()) return s;
  }
  if (!config.data.val_path.empty()) {
    return check_dataset_exists("data.val_path", config.data.val_path);
  }
  return absl::OkStatus();
}

}  // namespace troupe::trainers
