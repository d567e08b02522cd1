// ParamShardActor: the fp32 master weights and optimizer state of a stage
// (DESIGN.md s5). For DDP (ZeRO stage 0) a shard holds the whole stage.
//
// It lives in the process of its stage (same coordinate, same placement
// bundle) and reaches the stage's buffers through the hand-off table, so a
// commit moves no bytes over the network:
//
//   shard.call(&ParamShardActor::init)                       // masters from the seed
//   ... every stage's run_step(k) returned ...
//   shard.call(&ParamShardActor::commit, CommitRequest{k, lr, scale})
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "actors/mesh.h"
#include "actors/stage_tensors.h"
#include "actors/training_types.h"
#include "core/actor.h"
#include "nn/gpt_param_layout.h"

namespace troupe::actors {

struct ShardOptions {
  std::string job;
  Coordinate at;
  ModelSpec model;
  OptimizerSpec optimizer;
  Precision precision = Precision::kFp32;
  uint64_t seed = 0;  // the initialisation's
  TROUPE_FIELDS(job, at, model, optimizer, precision, seed);
};

class ParamShardActor {
 public:
  // Throws std::invalid_argument when the model is not valid (the spawn fails
  // with InvalidArgument and the reason).
  explicit ParamShardActor(ShardOptions options);

  // Sets the masters to GPT-2's initialisation from the seed, resets the
  // optimizer state and writes the compute copy into the stage's parameters.
  // Returns the number of parameters. FailedPrecondition if the stage of this
  // coordinate is not in this process.
  absl::StatusOr<int64_t> init();
  // Applies one optimizer update from the stage's reduced gradients (scaled
  // by grad_scale first) and refreshes the stage's compute copy. Returns the
  // number of updates applied so far.
  absl::StatusOr<int64_t> commit(CommitRequest request);
  // The fp32 master weights (for saving them).
  absl::StatusOr<std::vector<float>> master_params();
  // Replaces the masters (a loaded checkpoint) and refreshes the stage's copy;
  // the optimizer state starts afresh. InvalidArgument on a size mismatch.
  absl::Status load_params(std::vector<float> params);
  int64_t applied_steps() const { return applied_; }

 private:
  absl::StatusOr<std::shared_ptr<StageTensors>> stage();
  // The masters: the stage's own buffer in fp32, a separate one otherwise.
  float* masters(StageTensors& stage);
  void refresh_compute_copy(StageTensors& stage);

  ShardOptions options_;
  nn::GPTParamLayout layout_;
  std::vector<nn::ParamRange> no_decay_;  // AdamW's: biases and LayerNorm weights
  std::vector<float> master_;             // empty in fp32
  std::vector<float> m_;                  // AdamW's moments, or SGD's momentum in m_
  std::vector<float> v_;
  std::vector<uint16_t> rounded_;  // bf16/fp16: the compute copy's rounding scratch
  int64_t applied_ = 0;
};
TROUPE_ACTOR(ParamShardActor, &ParamShardActor::init, &ParamShardActor::commit,
             &ParamShardActor::master_params, &ParamShardActor::load_params,
             &ParamShardActor::applied_steps);

}  // namespace troupe::actors
