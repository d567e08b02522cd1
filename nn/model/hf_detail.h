// Internal to nn: what nn/model/hf.cc asks of each architecture, and the helpers they share.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nn/gpt2/config.h"
#include "nn/llama/config.h"
#include "nn/model/hf.h"

namespace troupe::nn::hf_detail {

std::vector<HfTensor> gpt2_tensors(const GPTConfig& config, const float* params);
nlohmann::ordered_json gpt2_config_json(const GPTConfig& config);
absl::StatusOr<GPTConfig> gpt2_config_from_hf(const nlohmann::json& j);
absl::Status gpt2_load(const GPTConfig& config, const HfLookup& lookup, float* params);

std::vector<HfTensor> llama_tensors(const LlamaConfig& config, const float* params);
nlohmann::ordered_json llama_config_json(const LlamaConfig& config);
absl::StatusOr<LlamaConfig> llama_config_from_hf(const nlohmann::json& j);
absl::Status llama_load(const LlamaConfig& config, const HfLookup& lookup, float* params);

// A [rows, cols] row-major matrix, transposed.
std::vector<float> transposed(const float* m, int64_t rows, int64_t cols);

// Copies the tensor `name` of `shape` into `out`, transposing a [cols, rows] one when
// `transpose` (out then holds [rows, cols] of what is stored [cols, rows]). Rows beyond the
// stored ones (a padded vocabulary) are left as they are. NotFound / InvalidArgument naming it.
absl::Status load_tensor(const HfLookup& lookup, const std::string& name,
                         const std::vector<int64_t>& shape, bool transpose, float* out);

// The integer (number, bool, string) at `key` of a config.json, or `fallback` when absent or
// null; InvalidArgument naming the key for a value of another type.
absl::StatusOr<int> int_key(const nlohmann::json& j, const char* key, int fallback);
absl::StatusOr<double> double_key(const nlohmann::json& j, const char* key, double fallback);
absl::StatusOr<bool> bool_key(const nlohmann::json& j, const char* key, bool fallback);
absl::StatusOr<std::string> string_key(const nlohmann::json& j, const char* key,
                                       const std::string& fallback);
absl::Status unsupported(const char* key, const std::string& what);

}  // namespace troupe::nn::hf_detail
