// ZeRO-1 for a model-parallel stage (pp > 1 or tp > 1): Megatron-LM's
// distributed optimizer. Each data-parallel rank owns partition d of its
// stage's range of its slice's buffer (actors/zero_partition.h), and its
// ParamShardActor the fp32 masters and optimizer state of that part only:
// the optimizer's memory is divided by dp, as DeepSpeed's ZeRO-1 divides it.
//
//   begin_step  the stage's parameters gathered from the partitions
//               (allgather, in place, in buckets of bucket_elements): each
//               shard wrote its updated part into the stage's buffer
//   backward    the gradients accumulate whole over the micro-batches; after
//               the last backward they are reduce-scattered, in place, in
//               buckets over the stage's range, each rank keeping the average
//               of its part
//
// With a tied head the first stage's embedding gradient is whole only once the last stage's share
// was added to it, which the stage does before its last backward, as with
// DDP (actors/allreduce_gradient_sync.h). Unlike DeepSpeed's ZeRO-1 on a
// whole model, the gathering does not overlap the forward yet.
#pragma once

#include <memory>
#include <vector>

#include "actors/gradient_sync.h"
#include "actors/pending_reductions.h"
#include "actors/stage_plan.h"
#include "actors/zero_partition.h"
#include "core/cluster/collective_group.h"
#include "transport/collectives/work.h"

namespace troupe::actors {

class DistributedOptimizerSync : public GradientSync {
 public:
  // REQUIRES: `buffers` hold the plan's whole range.
  DistributedOptimizerSync(const GradientSyncOptions& options, const StagePlan& plan,
                           nn::Model& gpt, CollectiveGroup& group, StageBuffers& buffers);
  ~DistributedOptimizerSync() override { drain(); }

  nn::ParamRange owned() const override { return partition_.own(); }
  float* owned_gradients() override { return buffers_.grads(partition_.own().begin); }
  absl::Status begin_step() override;
  absl::StatusOr<float> forward(const int32_t* inputs, const int32_t* targets, int B, int T,
                                bool last) override;
  absl::Status backward(float dloss, bool last) override;
  absl::Status finish(SyncTimes& times) override;
  void drain() override;
  absl::Status gather_parameters() override { return gather(); }

 private:
  // The stage's buckets: [begin, end) ranges of bucket_elements tiling its range.
  std::vector<nn::ParamRange> buckets() const;
  // Every partition's parameters into the whole stage, in place.
  absl::Status gather();
  GoOn go_on() const;

  GradientSyncOptions options_;
  StagePlan plan_;
  nn::Model& gpt_;
  CollectiveGroup& group_;
  StageBuffers& buffers_;
  ZeroPartition partition_;
  // This step's reductions, and the time spent issuing them.
  PendingReductions pending_;
  double issue_ms_ = 0;
  double gather_ms_ = 0;
  double backward_done_ms_ = 0;
};

}  // namespace troupe::actors
