// Pretrained weights in (training.init_from; docs/models.md, "Weights in and out"): a
// safetensors file, or a Hugging Face model directory - config.json with model.safetensors, or
// the files model.safetensors.index.json names - read into a whole flat buffer of the run's
// model, by the architecture's Hugging Face names (nn/model/hf.h).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/io/env.h"
#include "nn/model/config.h"

namespace troupe::checkpoint {

// The model `path` says it is: a directory's config.json, or a file's "config" metadata (what
// troupe export writes); nullopt for a file without one. InvalidArgument naming the key for a
// config.json troupe's architectures are not (nn::model_config_from_hf); NotFound when `path`
// is not there.
absl::StatusOr<std::optional<nn::ModelConfig>> pretrained_config(io::Env* env,
                                                                 const std::string& path);

// OK when `pretrained` is the model `run` describes; else InvalidArgument naming the first key
// that differs, with both values ("init_from: config.json's hidden_size is 128; model.hidden_size
// is 64"). The padded vocabulary is the run's own and not compared.
absl::Status check_pretrained_config(const nn::ModelConfig& run, const nn::ModelConfig& pretrained);

// The whole model's parameters (tensor-parallel size 1, the padding rows of the vocabulary zero)
// from `path`, after check_pretrained_config where it says what it is. NotFound naming a missing
// tensor or file, InvalidArgument naming a tensor of the wrong shape, DataLoss for a file that is
// not safetensors.
absl::StatusOr<std::vector<float>> load_pretrained(io::Env* env, const std::string& path,
                                                   const nn::ModelConfig& run);

}  // namespace troupe::checkpoint
