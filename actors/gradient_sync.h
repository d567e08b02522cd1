// GradientSync: how a stage's micro-batches run against its data-parallel
// group - the seam between the stage, which owns the model and the step
// protocol, and the strategy that exchanges gradients (and, for ZeRO-3,
// gathers parameters) with the other ranks (docs/design.md, "Training"). A
// new strategy is a new implementation of this interface, not an edit of the
// stage:
//   LocalGradientSync      dp = 1: nothing to exchange (gradient_sync.cc)
//   AllreduceGradientSync  DDP: bucketed allreduce overlapping backward
//                          (allreduce_gradient_sync.h)
//   ZeroGradientSync       ZeRO-1/2/3: reduce-scatter of 1/dp partitions,
//                          parameters gathered (zero_gradient_sync.h)
//   DistributedOptimizerSync  ZeRO-1 with pp or tp > 1 (Megatron's
//                          distributed optimizer): the stage's range
//                          reduce-scattered after its last backward
//                          (distributed_optimizer_sync.h)
//
// The stage calls, for each step, in this order:
//   begin_step()               clears the gradients; ZeRO starts gathering
//                              the parameters its shards last wrote
//   for every micro-batch j:   forward(...), then backward(dloss, last)
//   finish(times)              waits for every reduction
// After finish() returns OK, owned_gradients() holds the reduced gradients
// of owned(), the same as every other rank's that owns them. On an error
// (Aborted: a member of the group was lost) the step's gradients are
// unspecified and the stage fails the step; the next step starts afresh.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "absl/status/statusor.h"
#include "actors/stage_buffers.h"
#include "actors/stage_plan.h"
#include "nn/model/model.h"
#include "nn/optim/param_range.h"

namespace troupe {
class CollectiveGroup;
}

namespace troupe::actors {

// Communication time of one step, in milliseconds.
struct SyncTimes {
  double comm_ms = 0;     // issue to completion of every collective, summed
  double exposed_ms = 0;  // inside collective calls and waits, holding up compute
};

class GradientSync {
 public:
  virtual ~GradientSync() = default;

  // The range of the stage's parameters whose gradients this rank holds final
  // after finish(): the stage's whole range, or this rank's share of it.
  virtual nn::ParamRange owned() const = 0;
  // The gradients of owned() (owned().size() floats).
  virtual float* owned_gradients() = 0;
  // Starts a step (ZeRO: gathering the parameters the shards last wrote).
  virtual absl::Status begin_step() = 0;
  // One micro-batch [B, T]: its forward, returning the loss (NaN on a stage
  // that is not the last), and its backward with the loss scaled by dloss.
  // `last`: the step's last micro-batch.
  virtual absl::StatusOr<float> forward(const int32_t* inputs, const int32_t* targets, int B, int T,
                                        bool last) = 0;
  virtual absl::Status backward(float dloss, bool last) = 0;
  virtual absl::Status finish(SyncTimes& times) = 0;
  // Waits for every collective still running on the stage's buffers (after a
  // step that failed part-way). The stage calls it before it clears or reuses
  // its gradients; the destructor calls it too.
  virtual void drain() {}
  // Makes every parameter of the stage present in the model (for evaluation
  // and generation) until the next begin_step. A collective: every rank of the
  // group calls it.
  virtual absl::Status gather_parameters() { return absl::OkStatus(); }
  // The most bytes of gather buffers and gradient buckets held at once since
  // the last begin_step.
  virtual size_t peak_buffer_bytes() const { return 0; }
};

// How data-parallel replicas exchange gradients: DDP's allreduce, or ZeRO's stage 1, 2 or 3
// (the value is the stage: the config's zero_optimization.stage).
enum class GradientSyncKind : uint8_t {
  kAllreduce = 0,
  kZero1 = 1,
  kZero2 = 2,
  kZero3 = 3,
};
// The ZeRO stage of a kind: 0 for allreduce.
inline int zero_stage(GradientSyncKind kind) {
  return static_cast<int>(kind);
}
// The kind of ZeRO stage `stage`. REQUIRES: 0 <= stage <= 3.
inline GradientSyncKind gradient_sync_of_stage(int stage) {
  return static_cast<GradientSyncKind>(stage);
}
// "allreduce", "ZeRO-1", "ZeRO-2", "ZeRO-3".
const char* to_string(GradientSyncKind kind);

struct GradientSyncOptions {
  GradientSyncKind kind = GradientSyncKind::kAllreduce;
  int64_t bucket_elements = 500000000;  // reduce_bucket_size
  bool overlap_comm = true;             // issue reductions during backward (else after it)
  int micro_batches = 1;                // per step (gradient_accumulation_steps)
  // ZeRO-3 (DeepSpeed's stage3_* keys, in elements).
  int64_t prefetch_elements = 50000000;      // stage3_prefetch_bucket_size
  int64_t persistence_threshold = 100000;    // stage3_param_persistence_threshold
  int64_t max_live_parameters = 1000000000;  // stage3_max_live_parameters
};

// Which flat buffers the stage's model owns under `kind` with dp ranks:
// ZeRO-2 keeps only a partition of the gradients, ZeRO-3 of the parameters
// too (both bound block by block); dp = 1 and DDP keep both whole.
nn::ModelStorage model_storage(GradientSyncKind kind, int dp);

// What a ZeRO stage's sync works on besides the model: the partition, and
// the stage's buffers of its own part (null where the model owns the whole).
struct ZeroBuffers {
  float* own_params = nullptr;  // ZeRO-3: [partition.own()]
  float* own_grads = nullptr;   // ZeRO-2/3: [partition.own()]
};

// What make_gradient_sync would refuse in `options` for `gpt`, without a
// group: InvalidArgument naming the setting.
absl::Status check_gradient_sync(const GradientSyncOptions& options, const nn::Model& gpt);

// The strategy `options.kind` for a stage planned as `plan` over `gpt`, with
// `group` its data-parallel group (null when dp = 1: then nothing is
// exchanged, whatever the kind), `buffers` the stage's flat buffers
// (actors/stage_buffers.h; ZeRO-2/3, which holds partitions, does not use
// them) and, for ZeRO, the stage's buffers of its partition (model_storage
// says which). All must outlive the result.
// InvalidArgument for a kind outside the enum, or a plan or setting the strategy
// cannot serve.
absl::StatusOr<std::unique_ptr<GradientSync>> make_gradient_sync(
    const GradientSyncOptions& options, const StagePlan& plan, nn::Model& gpt,
    CollectiveGroup* group, StageBuffers& buffers, const ZeroBuffers& zero = {});

}  // namespace troupe::actors
