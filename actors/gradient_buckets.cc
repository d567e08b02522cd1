#include "actors/gradient_buckets.h"

namespace troupe::actors {

GradientBuckets::GradientBuckets(const nn::ModelLayout& layout, size_t bucket_elements,
                                 size_t first) {
  const int L = layout.num_layers();
  // Phase boundaries in the order backward finishes them: the head
  // [block_begin(L), n), each block's runs as Model::backward_blocks reports
  // them, then the embedding [first, block_begin(0)).
  std::vector<size_t> starts;
  starts.push_back(layout.block_begin(L));
  for (int l = L - 1; l >= 0; --l) {
    for (size_t mark : layout.backward_marks(l))
      starts.push_back(mark);
  }
  starts.push_back(first);
  size_t end = layout.num_params();
  for (size_t i = 0; i < starts.size(); ++i) {
    bool last = i + 1 == starts.size();
    if (end - starts[i] >= bucket_elements || last) {
      if (end > starts[i]) buckets_.push_back({starts[i], end});
      end = starts[i];
    }
  }
  // What backward finishes after block 0's attention projection (its q, k
  // and v, its first norm, the embedding) has almost no computation left to
  // hide behind: when buckets are meant to overlap (more than one), the last
  // holds only that.
  const size_t tail = layout.quiet_tail();
  if (buckets_.size() > 1 && buckets_.back().begin < tail && buckets_.back().end > tail) {
    GradientBucket& split = buckets_.back();
    const GradientBucket rest{split.begin, tail};
    split.begin = tail;
    buckets_.push_back(rest);
  }
}

std::vector<size_t> GradientBuckets::ready(size_t final_from) {
  std::vector<size_t> out;
  while (next_ < buckets_.size() && buckets_[next_].begin >= final_from)
    out.push_back(next_++);
  return out;
}

}  // namespace troupe::actors
