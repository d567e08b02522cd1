// GradientSync: how a stage's gradients become final across its data-parallel
// group - the seam between the stage, which runs forward and backward, and
// the strategy that exchanges gradients (docs/design.md, "Training"). A new
// strategy is a new implementation of this interface, not an edit of the
// stage:
//   LocalGradientSync      dp = 1: nothing to exchange (gradient_sync.cc)
//   AllreduceGradientSync  DDP: bucketed allreduce overlapping backward
//                          (allreduce_gradient_sync.h)
//   reduce-scatter (ZeRO-1/2) and gather-before-use (ZeRO-3) come next; they
//   own 1/dp of the stage's range instead of all of it.
//
// The stage calls, for each step, in this order:
//   for every micro-batch but the last: forward_stage, then backward_stage
//       (actors/stage_plan.h: gradients accumulate locally; nothing is communicated)
//   before_last_forward(inputs)   the last micro-batch's tokens, before its forward
//   (the last micro-batch's forward)
//   last_backward(gpt, dloss)     its backward, issuing reductions as backward
//                                 finishes gradients
//   finish(times)                 waits for every reduction
// After finish() returns OK, the gradients of owned() are final and the same
// as every other rank's that owns them. On an error (Aborted: a member of the
// group was lost) the step's gradients are unspecified and the stage fails the
// step; the next step starts afresh.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "absl/status/statusor.h"
#include "actors/stage_plan.h"
#include "nn/gpt.h"
#include "nn/optim/param_range.h"

namespace troupe {
class CollectiveGroup;
}

namespace troupe::actors {

// Communication time of one step, in milliseconds.
struct SyncTimes {
  double comm_ms = 0;     // issue to completion of every reduction, summed
  double exposed_ms = 0;  // inside reduction calls during backward, and waiting after it
};

class GradientSync {
 public:
  virtual ~GradientSync() = default;

  // The range of the stage's parameters whose gradients this rank holds final
  // after finish(): the stage's whole range, or this rank's share of it.
  virtual nn::ParamRange owned() const = 0;
  virtual absl::Status before_last_forward(std::span<const int32_t> inputs) = 0;
  virtual absl::Status last_backward(nn::GPT& gpt, float dloss) = 0;
  virtual absl::Status finish(SyncTimes& times) = 0;
  // Waits for every reduction still running on the stage's buffers (after a
  // step that failed part-way). The stage calls it before it clears or reuses
  // its gradients; the destructor calls it too.
  virtual void drain() {}
};

struct GradientSyncOptions {
  std::string kind = "allreduce";       // the strategy; "allreduce" is the only one so far
  int64_t bucket_elements = 500000000;  // reduce_bucket_size
  bool overlap_comm = true;             // issue reductions during backward (else after it)
};

// The strategy `options.kind` for a stage planned as `plan` over `gpt`, with
// `group` its data-parallel group (null when dp = 1: then nothing is
// exchanged, whatever the kind). Both must outlive the result.
// InvalidArgument for an unknown kind, or a plan the strategy cannot serve.
absl::StatusOr<std::unique_ptr<GradientSync>> make_gradient_sync(const GradientSyncOptions& options,
                                                                 const StagePlan& plan,
                                                                 nn::GPT& gpt,
                                                                 CollectiveGroup* group);

}  // namespace troupe::actors
