#include "nn/model/hf.h"

#include "absl/strings/str_cat.h"
#include "nn/model/hf_detail.h"

namespace troupe::nn {
namespace hf_detail {

std::vector<float> transposed(const float* m, int64_t rows, int64_t cols) {
  std::vector<float> t(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c)
      t[static_cast<size_t>(c * rows + r)] = m[r * cols + c];
  }
  return t;
}

absl::Status load_tensor(const HfLookup& lookup, const std::string& name,
                         const std::vector<int64_t>& shape, bool transpose, float* out) {
  const HfTensorView* t = lookup(name);
  if (t == nullptr) return absl::NotFoundError(absl::StrCat("no tensor ", name));
  std::vector<int64_t> want = shape;
  if (transpose) std::swap(want[0], want[1]);
  if (t->shape != want) {
    std::string have, expected;
    for (int64_t d : t->shape)
      absl::StrAppend(&have, have.empty() ? "" : ", ", d);
    for (int64_t d : want)
      absl::StrAppend(&expected, expected.empty() ? "" : ", ", d);
    return absl::InvalidArgumentError(
        absl::StrCat("tensor ", name, " has shape [", have, "]; the model's is [", expected, "]"));
  }
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  if (!transpose) {
    std::copy(t->data, t->data + n, out);
    return absl::OkStatus();
  }
  const int64_t rows = shape[0], cols = shape[1];  // out is [rows, cols], stored [cols, rows]
  for (int64_t c = 0; c < cols; ++c) {
    for (int64_t r = 0; r < rows; ++r)
      out[r * cols + c] = t->data[c * rows + r];
  }
  return absl::OkStatus();
}

absl::Status unsupported(const char* key, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("config.json: ", key, ": ", what));
}

absl::StatusOr<int> int_key(const nlohmann::json& j, const char* key, int fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > INT32_MAX) {
    return unsupported(key, absl::StrCat(it->dump(), " is not a size"));
  }
  return static_cast<int>(it->get<int64_t>());
}

absl::StatusOr<double> double_key(const nlohmann::json& j, const char* key, double fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_number()) return unsupported(key, absl::StrCat(it->dump(), " is not a number"));
  return it->get<double>();
}

absl::StatusOr<bool> bool_key(const nlohmann::json& j, const char* key, bool fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) return unsupported(key, absl::StrCat(it->dump(), " is not a boolean"));
  return it->get<bool>();
}

absl::StatusOr<std::string> string_key(const nlohmann::json& j, const char* key,
                                       const std::string& fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_string()) return unsupported(key, absl::StrCat(it->dump(), " is not a string"));
  return it->get<std::string>();
}

}  // namespace hf_detail

std::vector<HfTensor> hf_tensors(const ModelConfig& config, const float* params) {
  if (const GPTConfig* g = config.gpt2()) return hf_detail::gpt2_tensors(*g, params);
  return hf_detail::llama_tensors(*config.llama(), params);
}

nlohmann::ordered_json hf_config_json(const ModelConfig& config) {
  if (const GPTConfig* g = config.gpt2()) return hf_detail::gpt2_config_json(*g);
  return hf_detail::llama_config_json(*config.llama());
}

absl::StatusOr<ModelConfig> model_config_from_hf(const nlohmann::json& j) {
  if (!j.is_object()) return absl::InvalidArgumentError("config.json: not a JSON object");
  absl::StatusOr<std::string> type = hf_detail::string_key(j, "model_type", "");
  if (!type.ok()) return type.status();
  if (*type == "gpt2") {
    absl::StatusOr<GPTConfig> g = hf_detail::gpt2_config_from_hf(j);
    if (!g.ok()) return g.status();
    return ModelConfig(*g);
  }
  if (*type == "llama") {
    absl::StatusOr<LlamaConfig> l = hf_detail::llama_config_from_hf(j);
    if (!l.ok()) return l.status();
    return ModelConfig(*l);
  }
  return hf_detail::unsupported(
      "model_type",
      absl::StrCat("\"", *type, "\" is not an architecture troupe has (gpt2, llama)"));
}

absl::Status hf_load(const ModelConfig& config, const HfLookup& lookup, float* params) {
  if (const GPTConfig* g = config.gpt2()) return hf_detail::gpt2_load(*g, lookup, params);
  return hf_detail::llama_load(*config.llama(), lookup, params);
}

}  // namespace troupe::nn
