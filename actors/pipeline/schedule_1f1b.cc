// 1F1B (PipeDream-Flush; Megatron-LM's default): stage s of p first runs
// p - s - 1 forwards (warm-up), then alternates a forward and a backward
// (steady state), then runs the backwards left (cool-down). The bubble is
// GPipe's, but a stage holds at most p - s micro-batches' activations
// instead of all m.
#include <algorithm>

#include "actors/pipeline/schedule.h"

namespace troupe::actors::pipeline {

absl::StatusOr<Schedule> one_f_one_b(int stages, int micro_batches) {
  if (absl::Status s = check_shape(stages, micro_batches); !s.ok()) return s;
  Schedule schedule{.name = "1f1b", .stages = stages, .micro_batches = micro_batches};
  schedule.programs.resize(stages);
  for (int s = 0; s < stages; ++s) {
    std::vector<PipelineOp>& program = schedule.programs[s];
    const int warmup = std::min(stages - s - 1, micro_batches);
    int forwards = 0, backwards = 0;
    for (; forwards < warmup; ++forwards)
      add_forward(schedule, s, forwards, 0, program);
    for (; forwards < micro_batches; ++forwards, ++backwards) {
      add_forward(schedule, s, forwards, 0, program);
      add_backward(schedule, s, backwards, 0, program);
    }
    for (; backwards < micro_batches; ++backwards)
      add_backward(schedule, s, backwards, 0, program);
  }
  return schedule;
}

}  // namespace troupe::actors::pipeline
