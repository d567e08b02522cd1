// Interleaved 1F1B (Narayanan et al. 2021; Megatron-LM's virtual pipeline):
// each of the p stages holds v chunks of the model, chunk c of stage s being
// virtual stage c p + s. Micro-batches go through in groups of p: the k-th
// forward of a stage is of chunk (k mod p v) / p and micro-batch
// (k / p v) p + k mod p; the k-th backward the same with the chunks
// reversed. Stage s warms up with 2 (p - s - 1) + (v - 1) p forwards (all
// of them when m = p), then alternates one forward and one backward, then
// drains. The bubble shrinks v times: (p - 1) / (v m + p - 1).
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "actors/pipeline/schedule.h"

namespace troupe::actors::pipeline {

absl::StatusOr<Schedule> interleaved_one_f_one_b(int stages, int micro_batches, int chunks) {
  if (absl::Status s = check_shape(stages, micro_batches); !s.ok()) return s;
  if (chunks < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "interleaved 1F1B needs at least 2 model chunks a stage (virtual_stages); got ", chunks));
  }
  if (micro_batches % stages != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("interleaved 1F1B needs the micro-batches (", micro_batches,
                     ") to be a multiple of the pipeline stages (", stages, ")"));
  }
  Schedule schedule{
      .name = "interleaved", .stages = stages, .micro_batches = micro_batches, .chunks = chunks};
  schedule.programs.resize(stages);
  const int group = stages * chunks;
  const int total = micro_batches * chunks;
  auto micro_of = [&](int k) { return (k / group) * stages + k % stages; };
  auto chunk_of = [&](int k, bool forward) {
    const int c = (k % group) / stages;
    return forward ? c : chunks - 1 - c;
  };
  for (int s = 0; s < stages; ++s) {
    std::vector<PipelineOp>& program = schedule.programs[s];
    const int warmup = micro_batches == stages
                           ? total
                           : std::min(2 * (stages - s - 1) + (chunks - 1) * stages, total);
    int forwards = 0, backwards = 0;
    for (; forwards < warmup; ++forwards)
      add_forward(schedule, s, micro_of(forwards), chunk_of(forwards, true), program);
    for (; forwards < total; ++forwards, ++backwards) {
      add_forward(schedule, s, micro_of(forwards), chunk_of(forwards, true), program);
      add_backward(schedule, s, micro_of(backwards), chunk_of(backwards, false), program);
    }
    for (; backwards < total; ++backwards)
      add_backward(schedule, s, micro_of(backwards), chunk_of(backwards, false), program);
  }
  return schedule;
}

}  // namespace troupe::actors::pipeline
