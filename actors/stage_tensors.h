// What a stage shares with the parameter shard of its coordinate (through
// actors/handoff.h): the stage's parameter and gradient buffers - the whole
// flat buffers, or under ZeRO only this rank's partition of one or both -
// and where the step protocol stands between the two.
//
// Between run_step and commit the stage does not touch the buffers; the shard
// writes the parameters only in commit, load, init and a restore. The
// buffers and their ranges change only when a ZeRO stage is resized
// (PipelineStageActor::resize), which the trainer orders before its shard
// uses them again (adopt_partition, a restore). The step fields are
// atomics because the two are different actors (possibly on different
// threads); the controller's ordering (commit only after run_step returned)
// is what makes the buffers safe.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>

#include "actors/training_types.h"
#include "core/cluster/collective_group.h"
#include "nn/device.h"
#include "nn/optim/param_range.h"

namespace troupe::actors {

struct StageTensors {
  // The compute copy the stage runs with, of the parameters params_held
  // (params[0] is parameter params_held.begin).
  float* params = nullptr;
  nn::ParamRange params_held;
  // The synchronised gradients of the step in `held_step`, of grads_held.
  float* grads = nullptr;
  nn::ParamRange grads_held;
  size_t n = 0;  // the model's parameters
  // Where `params` and `grads` live: the stage's device, on which the shard keeps its state
  // and runs the optimizer (nn/device_backend.h).
  nn::Device device;

  // Counts the shard's writes of `params` (init, load, commit): the stage
  // gathers the other ranks' partitions again after one (ZeRO).
  std::atomic<int64_t> params_version{0};
  // The bytes of the shard's optimizer state and fp32 masters (for the
  // stage's memory report).
  std::atomic<int64_t> optimizer_bytes{0};

  // The step whose synchronised gradients `grads` holds, ready to commit; 0
  // when none (set by the stage's run_step, cleared by discard and commit).
  std::atomic<int64_t> held_step{0};
  // The last step whose update the shard applied to `params` (0: none yet).
  std::atomic<int64_t> applied_step{0};
  // How long the shard's update of applied_step took (its optimizer kernel and the compute copy's
  // refresh), in microseconds: the stage reports it with its next step (the trace's shard track).
  std::atomic<int64_t> update_us{0};
  // Set by the shard when it loaded a checkpoint of this step: the stage's
  // next run_step takes it as the last step run (and clears it); -1: none.
  std::atomic<int64_t> restored_step{-1};

  // How far the stage's step got, for a probe while the stage is busy
  // running it (ParamShardActor::progress): the step run_step is running (0
  // between steps), and the collectives its group has issued.
  std::atomic<int64_t> running_step{0};
  void set_group(const CollectiveGroup* group) {
    std::lock_guard<std::mutex> lock(group_mu_);
    group_ = group;
  }
  StepProgress progress() const {
    StepProgress out{.running_step = running_step.load()};
    std::lock_guard<std::mutex> lock(group_mu_);
    if (group_ != nullptr) {
      out.grouped = true;
      out.generation = group_->generation();
      out.collectives_issued = group_->collectives_issued();
    }
    return out;
  }

 private:
  mutable std::mutex group_mu_;
  const CollectiveGroup* group_ = nullptr;  // the stage's data-parallel group, while it has one
};

}  // namespace troupe::actors
