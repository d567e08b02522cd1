// Gradient buckets for data-parallel reduction (PyTorch DDP's buckets,
// DeepSpeed's reduce_bucket_size): the flat gradient buffer of a model split
// into ranges that are reduced as soon as backward has finished them, so that
// communication overlaps the rest of backward.
//
// Backward finishes the buffer from its end: the head first, then blocks L-1
// down to 0, each run by run as Model::backward_blocks reports them
// (layout.backward_marks(l): for the GPT, MLP, norm, attention, norm),
// then the embedding (the token embedding last of all: a tied LM head adds to
// it in the first phase and the embedding in the last). Buckets are whole
// runs, grouped from the end until each holds at least `bucket_elements`
// gradients; when there is more than one, the last holds only what follows
// layout.quiet_tail(), since nothing of substance is computed after it. They
// may leave out the buffer's start [0, first): data parallelism reduces the
// token embedding's gradient on its own, in two shares
// (allreduce_gradient_sync.h), and passes first = token_embedding().end.
//
//   GradientBuckets buckets(layout, 25'000'000, layout.token_embedding().end);
//   model.head_backward();          issue(buckets.ready(layout.block_begin(L)))
//   model.backward_blocks(0, L, [&](size_t from) { issue(buckets.ready(from)); })
//   model.embed_backward();         issue(buckets.ready(0))
#pragma once

#include <cstddef>
#include <vector>

#include "nn/model/layout.h"

namespace troupe::actors {

struct GradientBucket {
  size_t begin = 0;  // offsets into the flat buffer, [begin, end)
  size_t end = 0;
};

class GradientBuckets {
 public:
  // REQUIRES: bucket_elements >= 1; first <= layout.block_begin(0).
  GradientBuckets(const nn::ModelLayout& layout, size_t bucket_elements, size_t first = 0);

  // Every bucket, in the order backward finishes them (descending offsets).
  // They cover [first, num_params) without overlap.
  const std::vector<GradientBucket>& buckets() const { return buckets_; }

  // Marks everything from `final_from` to the end of the buffer as final and
  // returns the indices of the buckets that became ready with it (each
  // bucket once over the calls since the last reset()).
  std::vector<size_t> ready(size_t final_from);
  // Starts a new backward: no bucket is ready.
  void reset() { next_ = 0; }

 private:
  std::vector<GradientBucket> buckets_;
  size_t next_ = 0;  // buckets before next_ were returned by ready()
};

}  // namespace troupe::actors
