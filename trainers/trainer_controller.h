// TrainerController: drives the steps of a training job from the driver
// (DESIGN.md s5). A step is all-or-nothing:
//
//   1. run_step(k) on every stage, in parallel: forward, backward, gradient
//      reduction. Nothing is applied yet.
//   2. if every stage succeeded and no gradient overflowed: clip on the
//      global norm, then commit(k) on every parameter shard (the optimizer
//      update); otherwise discard(k) on every stage, and the step is either
//      skipped (an fp16 overflow: the loss scale backs off, as DeepSpeed
//      does) or fails the job with the first stage's error.
//
// The learning-rate schedule and the loss scaler live here, so every shard
// applies the same rate and scale.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "actors/param_shard_actor.h"
#include "actors/pipeline_stage_actor.h"
#include "core/actor.h"
#include "nn/optim/loss_scaler.h"
#include "nn/optim/schedule.h"

namespace troupe::trainers {

// The actors of one data-parallel replica (pp = tp = 1).
struct Replica {
  ActorRef<actors::PipelineStageActor> stage;
  ActorRef<actors::ParamShardActor> shard;
};

struct ControllerOptions {
  nn::LrSchedule schedule = nn::LrSchedule::constant(1e-3f);
  float gradient_clipping = 0;  // max global norm; 0: no clipping
  // fp16: a dynamic loss scaler (DeepSpeed's), or a static scale when
  // static_loss_scale > 0. Neither: no loss scaling.
  std::optional<nn::LossScalerConfig> dynamic_loss_scale;
  double static_loss_scale = 0;
  absl::Duration step_timeout = absl::Minutes(10);
};

// One step, as the controller saw it.
struct StepOutcome {
  int64_t step = 0;
  bool applied = false;  // false: skipped (fp16 overflow)
  double loss = 0;       // mean over the global batch
  double grad_norm = 0;  // global, unscaled, before clipping
  bool clipped = false;
  float lr = 0;           // the rate applied (0 when skipped)
  double loss_scale = 1;  // the scale this step ran with
  int64_t samples = 0;    // in the global batch
  int64_t tokens = 0;
  int64_t data_position = 0;
  int64_t epoch = 0;
  double step_ms = 0;          // wall time of the whole step, as the driver saw it
  double compute_ms = 0;       // slowest stage: forward + backward
  double comm_ms = 0;          // slowest stage: allreduce issue to completion, summed
  double comm_exposed_ms = 0;  // slowest stage: waiting for allreduce after backward
  double overhead_ms = 0;      // step_ms minus the slowest stage's run_step and commit
};

class TrainerController {
 public:
  // InvalidArgument for a bad loss-scaler config or no replicas.
  static absl::StatusOr<TrainerController> create(std::vector<Replica> replicas,
                                                  ControllerOptions options);

  // Runs and commits (or skips) step `step`; steps count from 1.
  absl::StatusOr<StepOutcome> step(int64_t step);
  int64_t applied_steps() const { return applied_; }
  double loss_scale() const;
  const std::vector<Replica>& replicas() const { return replicas_; }

 private:
  TrainerController(std::vector<Replica> replicas, ControllerOptions options)
      : replicas_(std::move(replicas)), options_(std::move(options)) {}
  absl::Status discard_all(int64_t step);

  std::vector<Replica> replicas_;
  ControllerOptions options_;
  std::optional<nn::DynamicLossScaler> scaler_;
  int64_t applied_ = 0;
};

}  // namespace troupe::trainers
