// GPipe (Huang et al. 2019): every stage runs all the step's forwards, then
// all its backwards in the same order. Simple, and it holds every
// micro-batch's activations until the backwards begin.
#include "actors/pipeline/schedule.h"

namespace troupe::actors::pipeline {

absl::StatusOr<Schedule> gpipe(int stages, int micro_batches) {
  if (absl::Status s = check_shape(stages, micro_batches); !s.ok()) return s;
  Schedule schedule{.name = "gpipe", .stages = stages, .micro_batches = micro_batches};
  schedule.programs.resize(stages);
  for (int s = 0; s < stages; ++s) {
    for (int i = 0; i < micro_batches; ++i)
      add_forward(schedule, s, i, 0, schedule.programs[s]);
    for (int i = 0; i < micro_batches; ++i)
      add_backward(schedule, s, i, 0, schedule.programs[s]);
  }
  return schedule;
}

}  // namespace troupe::actors::pipeline
