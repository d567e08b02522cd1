// What a stage hands its parameter shard (actors/handoff.h): the model's flat
// parameter and gradient buffers, which the shard reads and writes on commit.
// Between run_step and commit the stage does not touch them, so no lock is
// needed beyond the actor runtime's ordering (the controller commits only
// after every run_step returned).
#pragma once

#include <cstddef>

namespace troupe::actors {

struct StageTensors {
  float* params = nullptr;  // the compute copy the stage runs with
  float* grads = nullptr;   // the reduced gradients of the last step
  size_t n = 0;
};

}  // namespace troupe::actors
