// ZeRO's parameter gathering over a stage's segments (the embeddings, each
// block, the head: ModelLayout::segments), as the stage's micro-batches
// use them.
//
// ZeRO-1/2 (in place): the model owns the whole parameter buffer; after the
// shards wrote their partitions, begin_step issues one allgather_v per
// segment into it (every step, as DeepSpeed's optimizer step does), and a piece of forward waits
// only for its own segments, so that the gathering overlaps the forward in front of it.
//
// ZeRO-3 (buffered): the model holds no parameters. Each piece of a
// micro-batch (embed_forward, a block's forward, the head's forward and
// backward, a block's backward, embed_backward) acquires its segments: each
// is gathered from the ranks' partitions into a buffer of its own and bound
// into the model; release() frees it again unless the next two pieces use it.
// Segments ahead are gathered while the current piece runs until
// `prefetch_elements` are in flight, never holding more than
// `max_live_elements` at once; segments below `persistence_threshold`
// elements are gathered once per step and kept.
//
//   gather.begin_step(micro_batches);
//   for each micro-batch, for each piece p in order:
//     gather.acquire(p); run the piece; gather.release(p);
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "actors/buffer_pool.h"
#include "actors/zero_partition.h"
#include "core/cluster/collective_group.h"
#include "nn/memory.h"
#include "nn/model/model.h"

namespace troupe::actors {

struct ParamGatherOptions {
  bool buffered = false;  // ZeRO-3; else in place (ZeRO-1/2)
  int64_t prefetch_elements = 50000000;
  int64_t max_live_elements = 1000000000;
  int64_t persistence_threshold = 100000;
};

class ParamGather {
 public:
  // The pieces of one micro-batch of a model of L blocks, and the segments
  // each uses: embed_forward {E}, blocks 0..L-1 forward, the head {F, E},
  // blocks L-1..0 backward, embed_backward {E}.
  static std::vector<std::vector<int>> pieces(int num_layers);

  // `own_params`: ZeRO-3's partition of the parameters (own() of
  // `partition`); in place, the model's own buffer is gathered into.
  // Buffered, the gathered copies come from `pool` (which must outlive this).
  ParamGather(const ParamGatherOptions& options, nn::Model& gpt, CollectiveGroup& group,
              const ZeroPartition& partition, const float* own_params, BufferPool& pool);
  ~ParamGather() { drain(); }

  // Starts a step of `micro_batches` micro-batches. In place, gathers every
  // segment again (every rank does, whatever its own shard did: the ranks'
  // collectives must pair up).
  absl::Status begin_step(int micro_batches);
  // Waits for (gathering first if needed) the segments of piece `piece` of
  // the current micro-batch and binds them; gathers ahead.
  absl::Status acquire(int piece);
  // Lets go of what piece `piece` used and later pieces do not need soon.
  // After the last piece the next micro-batch begins.
  void release(int piece);
  // Every segment gathered and bound (evaluation), until begin_step.
  absl::Status gather_all();
  // Waits for every gather in flight and lets go of what is gathered.
  void drain();

  // Time spent waiting for gathers, and issue to completion of each, summed.
  double wait_ms() const { return wait_ms_; }
  double comm_ms() const { return comm_ms_; }

 private:
  struct Segment {
    nn::ParamRange range;
    std::vector<size_t> bytes;  // of each rank's part, for allgather_v
    bool persistent = false;
    nn::FloatBuffer buffer;  // buffered: the gathered copy
    transport::Work work = transport::Work::done_with(absl::OkStatus());
    double issued_at = 0;
    bool present = false;  // gathered or being gathered (buffered); bound once waited
    bool waited = false;
  };
  absl::Status issue(int segment);
  absl::Status wait(int segment);
  // The position of piece `piece` of micro-batch `micro` in the step.
  int position(int micro, int piece) const { return micro * num_pieces() + piece; }
  int num_pieces() const { return static_cast<int>(pieces_.size()); }
  const std::vector<int>& at(int pos) const { return pieces_[pos % num_pieces()]; }
  void prefetch(int from_pos);
  void free_segment(int segment);
  size_t live_elements() const;

  ParamGatherOptions options_;
  nn::Model& gpt_;
  CollectiveGroup& group_;
  ZeroPartition partition_;
  const float* own_params_;
  std::vector<Segment> segments_;
  std::vector<std::vector<int>> pieces_;
  absl::Status failed_;  // a prefetch this rank could not issue: the step fails
  int micro_batches_ = 1;
  int micro_ = 0;         // the micro-batch running
  int issued_upto_ = -1;  // positions up to here have their segments issued
  BufferPool& pool_;
  std::vector<nn::FloatBuffer> all_;  // gather_all's buffer
  double wait_ms_ = 0;
  double comm_ms_ = 0;
};

}  // namespace troupe::actors
