#include "checkpoint/pretrained.h"

#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "absl/strings/str_cat.h"
#include "checkpoint/safetensors.h"
#include "nn/model/config_json.h"
#include "nn/model/hf.h"
#include "nn/model/model.h"

namespace troupe::checkpoint {
namespace {

constexpr size_t kMaxConfigBytes = 1 << 20;

bool is_directory(io::Env* env, const std::string& path) {
  return env->children(path).ok();
}

absl::StatusOr<nlohmann::json> read_json(io::Env* env, const std::string& path) {
  absl::StatusOr<std::string> text = env->read_file(path, kMaxConfigBytes);
  if (!text.ok()) return text.status();
  nlohmann::json j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(path, ": not JSON"));
  return j;
}

// The safetensors files of `path`: itself, or a directory's model.safetensors or the files its
// model.safetensors.index.json maps the tensors to.
absl::StatusOr<std::vector<std::string>> weight_files(io::Env* env, const std::string& path) {
  if (!is_directory(env, path)) return std::vector<std::string>{path};
  if (env->exists(path + "/model.safetensors")) {
    return std::vector<std::string>{path + "/model.safetensors"};
  }
  const std::string index = path + "/model.safetensors.index.json";
  if (!env->exists(index)) {
    return absl::NotFoundError(absl::StrCat(
        path, ": neither model.safetensors nor model.safetensors.index.json is there"));
  }
  absl::StatusOr<nlohmann::json> j = read_json(env, index);
  if (!j.ok()) return j.status();
  std::set<std::string> files;
  if (!j->contains("weight_map") || !(*j)["weight_map"].is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(index, ": no weight_map"));
  }
  for (const auto& [name, file] : (*j)["weight_map"].items()) {
    const std::string f = file.is_string() ? file.get<std::string>() : "";
    if (f.empty() || f.find('/') != std::string::npos || f == "..") {
      return absl::InvalidArgumentError(
          absl::StrCat(index, ": tensor ", name, " maps to ", file.dump(), ", not a file here"));
    }
    files.insert(f);
  }
  std::vector<std::string> out;
  for (const std::string& f : files)
    out.push_back(path + "/" + f);
  return out;
}

// The config a file's "config" metadata holds, if it holds one.
absl::StatusOr<std::optional<nn::ModelConfig>> metadata_config(
    const std::string& path, const std::map<std::string, std::string>& metadata) {
  auto it = metadata.find("config");
  if (it == metadata.end()) return std::optional<nn::ModelConfig>();
  const nlohmann::json config = nlohmann::json::parse(it->second, nullptr, false);
  if (config.is_discarded()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": its \"config\" metadata is not JSON"));
  }
  absl::StatusOr<nn::ModelConfig> model = nn::model_config_from_hf(config);
  if (!model.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", model.status().message()));
  }
  return std::optional<nn::ModelConfig>(*model);
}

}  // namespace

absl::StatusOr<std::optional<nn::ModelConfig>> pretrained_config(io::Env* env,
                                                                 const std::string& path) {
  if (!env->exists(path)) return absl::NotFoundError(absl::StrCat(path, ": not there"));
  if (!is_directory(env, path)) {
    std::map<std::string, std::string> metadata;
    absl::StatusOr<std::vector<SafeTensor>> tensors = read_safetensors(env, path, &metadata);
    if (!tensors.ok()) return tensors.status();
    return metadata_config(path, metadata);
  }
  absl::StatusOr<nlohmann::json> config = read_json(env, path + "/config.json");
  if (!config.ok()) return config.status();
  absl::StatusOr<nn::ModelConfig> model = nn::model_config_from_hf(*config);
  if (!model.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, "/config.json: ", model.status().message()));
  }
  return std::optional<nn::ModelConfig>(*model);
}

absl::Status check_pretrained_config(const nn::ModelConfig& run,
                                     const nn::ModelConfig& pretrained) {
  const nlohmann::ordered_json want = nn::model_config_to_json(run);
  const nlohmann::ordered_json have = nn::model_config_to_json(pretrained);
  if (want["type"] != have["type"]) {
    return absl::InvalidArgumentError(
        absl::StrCat("init_from: config.json is a ", have["type"].get<std::string>(),
                     " model; model.type is ", want["type"].get<std::string>()));
  }
  for (const auto& [key, value] : want.items()) {
    if (key == "padded_vocab_size" || key == "type") continue;
    if (have[key] != value) {
      return absl::InvalidArgumentError(absl::StrCat("init_from: config.json's ", key, " is ",
                                                     have[key].dump(), "; model.", key, " is ",
                                                     value.dump()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> load_pretrained(io::Env* env, const std::string& path,
                                                   const nn::ModelConfig& run) {
  if (!env->exists(path))
    return absl::NotFoundError(absl::StrCat("init_from ", path, ": not there"));
  const bool directory = is_directory(env, path);
  std::optional<nn::ModelConfig> config;
  if (directory) {
    absl::StatusOr<std::optional<nn::ModelConfig>> c = pretrained_config(env, path);
    if (!c.ok()) return c.status();
    config = *c;
  }
  absl::StatusOr<std::vector<std::string>> files = weight_files(env, path);
  if (!files.ok()) return files.status();
  std::map<std::string, nn::HfTensorView> views;
  std::vector<std::vector<SafeTensor>> held;
  for (const std::string& file : *files) {
    std::map<std::string, std::string> metadata;
    absl::StatusOr<std::vector<SafeTensor>> tensors = read_safetensors(env, file, &metadata);
    if (!tensors.ok()) return tensors.status();
    if (!directory) {
      absl::StatusOr<std::optional<nn::ModelConfig>> c = metadata_config(file, metadata);
      if (!c.ok()) return c.status();
      config = *c;
    }
    held.push_back(*std::move(tensors));
    for (const SafeTensor& t : held.back())
      views[t.name] = {t.shape, t.data.data()};
  }
  if (config) {
    if (absl::Status s = check_pretrained_config(run, *config); !s.ok()) return s;
  }
  std::vector<float> params(nn::model_layout(run).num_params(), 0.0f);
  const nn::HfLookup lookup = [&](const std::string& name) -> const nn::HfTensorView* {
    auto it = views.find(name);
    return it == views.end() ? nullptr : &it->second;
  };
  if (absl::Status s = nn::hf_load(run, lookup, params.data()); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("init_from ", path, ": ", s.message()));
  }
  return params;
}

}  // namespace troupe::checkpoint
