// Internal to trainers/config*.cc: one reader per part of the config. Each
// reads its keys from the top-level object into *config, appends its
// warnings to config->warnings, and returns InvalidArgument naming the key
// (see parse_train_config in config.h).
#pragma once

#include "absl/status/status.h"
#include "trainers/config.h"
#include "trainers/config_reader.h"

namespace troupe::trainers::config_detail {

// config_model.cc
// `model`: its architecture's keys, bounded, through the model config's codec.
[[nodiscard]] absl::Status parse_model(JsonObject& top, TrainConfig* config);
// config_parse.cc
[[nodiscard]] absl::Status parse_data(JsonObject& top, TrainConfig* config);
// `parallel`, and Megatron's top-level tensor_model_parallel_size and
// pipeline_model_parallel_size.
[[nodiscard]] absl::Status parse_parallel(JsonObject& top, TrainConfig* config);
// What pp > 1 and tp > 1 do not run with yet. REQUIRES: every section read.
[[nodiscard]] absl::Status check_model_parallel(const TrainConfig& config);
// `training` and the top-level steps_per_print.
[[nodiscard]] absl::Status parse_training(JsonObject& top, TrainConfig* config);
// `checkpoint`.
[[nodiscard]] absl::Status parse_checkpoint(JsonObject& top, TrainConfig* config);
// `fault_tolerance`.
[[nodiscard]] absl::Status parse_fault_tolerance(JsonObject& top, TrainConfig* config);
// config_elasticity.cc
// `elasticity`. REQUIRES: parse_batch ran (the sizes are checked against the batch).
[[nodiscard]] absl::Status parse_elasticity(JsonObject& top, TrainConfig* config);

// The three batch keys. REQUIRES: parse_parallel ran (the rule uses dp).
[[nodiscard]] absl::Status parse_batch(JsonObject& top, TrainConfig* config);

// config_optim.cc
// `optimizer` and gradient_clipping.
[[nodiscard]] absl::Status parse_optimizer(JsonObject& top, TrainConfig* config);
// REQUIRES: parse_optimizer and parse_training ran (base_lr and the default
// total_num_steps come from them).
[[nodiscard]] absl::Status parse_scheduler(JsonObject& top, TrainConfig* config);
// `fp16`, `bf16` (and its old name `bfloat16`).
[[nodiscard]] absl::Status parse_precision(JsonObject& top, TrainConfig* config);
[[nodiscard]] absl::Status parse_zero(JsonObject& top, TrainConfig* config);

}  // namespace troupe::trainers::config_detail
