// ZeRO's gradient exchange (DeepSpeed's zero_optimization stages 1-3) on the
// data-parallel group: each rank owns partition r of the stage's flat buffer
// (actors/zero_partition.h), and its ParamShardActor the fp32 masters and
// optimizer state of that part only.
//
//   stage 1  Gradients accumulate whole over the micro-batches, as in DDP;
//            the last micro-batch's backward reduce-scatters them in buckets
//            of whole layers (reduce_bucket_size) as it finishes them, each
//            rank keeping its part (in place: the model's own buffer).
//   stage 2  The model holds no gradient buffer: every micro-batch's
//            backward accumulates into buckets of whole segments (blocks,
//            reduce_bucket_size), each reduce-scattered as soon as backward
//            leaves it and its part added to the rank's partition; at most
//            two reductions are in flight, beside the bucket being written
//            and the embeddings' (which collects the tied LM head's share
//            first and the embedding's last).
//   stage 3  As stage 2, and the model holds no parameters either: each
//            segment is gathered from the partitions just before a piece of
//            forward or backward uses it (actors/zero_param_gather.h).
// At stages 1 and 2 the model's whole parameter buffer is refreshed from the
// shards' partitions at the start of each step, a segment at a time, so that
// the gathering overlaps the forward.
//
// With overlap_comm false, a micro-batch's reductions are issued after its
// backward instead of during it.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "actors/gradient_buckets.h"
#include "actors/gradient_sync.h"
#include "actors/zero_param_gather.h"
#include "actors/zero_partition.h"
#include "core/cluster/collective_group.h"
#include "nn/memory.h"

namespace troupe::actors {

class ZeroGradientSync : public GradientSync {
 public:
  // InvalidArgument for a stage other than 1-3, or (stage 3) a
  // max_live_parameters below the largest segment, which is gathered whole.
  // REQUIRES: the model's storage is model_storage("zero<stage>", dp); the
  // buffers hold partition own() (ZeroBuffers).
  static absl::StatusOr<std::unique_ptr<ZeroGradientSync>> create(
      const GradientSyncOptions& options, int stage, const StagePlan& plan, nn::Model& gpt,
      CollectiveGroup& group, const ZeroBuffers& buffers);
  ~ZeroGradientSync() override { drain(); }
  // What create refuses in `options`, checked without a group.
  static absl::Status check(const GradientSyncOptions& options, int stage,
                            const nn::ModelLayout& layout);

  nn::ParamRange owned() const override { return partition_.own(); }
  float* owned_gradients() override;
  absl::Status begin_step() override;
  absl::StatusOr<float> forward(const int32_t* inputs, const int32_t* targets, int B, int T,
                                bool last) override;
  absl::Status backward(float dloss, bool last) override;
  absl::Status finish(SyncTimes& times) override;
  void drain() override;
  absl::Status gather_parameters() override;
  size_t peak_buffer_bytes() const override;

 private:
  // A range of whole segments whose gradients are reduced together.
  struct Bucket {
    nn::ParamRange range;
    int top = 0;  // its segments [bottom, top], backward finishes top first
    int bottom = 0;
  };
  // A bucket's reduction in flight (stages 2, 3), or one issued in place
  // (stage 1: no scratch).
  struct Reduction {
    int bucket = 0;
    nn::FloatBuffer scratch;
    transport::Work work;
    double issued_at = 0;
  };

  ZeroGradientSync(const GradientSyncOptions& options, int stage, const StagePlan& plan,
                   nn::Model& gpt, CollectiveGroup& group, const ZeroBuffers& buffers);
  // Buckets of whole segments from the end; the embeddings (segment 0) alone.
  void plan_buckets(const std::vector<nn::ParamRange>& segments);
  // Stage 1: a micro-batch's backward; the last one's issues buckets of
  // layers as they finish.
  absl::Status backward_in_place(float dloss, bool last);
  void issue_ready(const std::vector<size_t>& ready);
  // Stages 2, 3: one micro-batch's backward into bucket scratch.
  absl::Status backward_partitioned(float dloss);
  absl::Status run_piece(int piece, const std::function<absl::Status()>& body);
  // Binds a zeroed scratch for bucket b's gradients (retiring the oldest
  // reduction first when two are in flight).
  absl::Status open_bucket(int b);
  void issue(int b);
  void issue_in_place(size_t begin, size_t end);
  // Issues `red`: the reduce-scatter of [range] held at `data`, in place.
  void reduce(Reduction red, float* data, nn::ParamRange range);
  // Waits for the oldest reduction and adds its part to the partition.
  absl::Status retire_oldest();

  GradientSyncOptions options_;
  int stage_;
  nn::Model& gpt_;
  CollectiveGroup& group_;
  ZeroPartition partition_;
  ZeroBuffers buffers_;
  BufferPool pool_;  // gathered segments and gradient buckets
  ParamGather gather_;
  std::vector<Bucket> buckets_;        // descending: buckets_[0] holds the head
  std::vector<int> bucket_of_;         // segment -> its bucket
  std::vector<nn::FloatBuffer> open_;  // by bucket: the scratch backward writes now
  std::deque<Reduction> in_flight_;
  GradientBuckets layer_buckets_;  // stage 1: buckets of whole layers
  double issue_ms_ = 0, wait_ms_ = 0, comm_ms_ = 0;
};

}  // namespace troupe::actors
