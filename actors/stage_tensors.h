// What a stage shares with the parameter shard of its coordinate (through
// actors/handoff.h): the stage's flat parameter and gradient buffers, and
// where the step protocol stands between the two.
//
// Between run_step and commit the stage does not touch the buffers; the shard
// writes the parameters only in commit, load and init. The step fields are
// atomics because the two are different actors (possibly on different
// threads); the controller's ordering (commit only after run_step returned)
// is what makes the buffers safe.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace troupe::actors {

struct StageTensors {
  float* params = nullptr;  // the compute copy the stage runs with
  float* grads = nullptr;   // the synchronised gradients of the step in `held_step`
  size_t n = 0;

  // The step whose synchronised gradients `grads` holds, ready to commit; 0
  // when none (set by the stage's run_step, cleared by discard and commit).
  std::atomic<int64_t> held_step{0};
  // The last step whose update the shard applied to `params` (0: none yet).
  std::atomic<int64_t> applied_step{0};
};

}  // namespace troupe::actors
