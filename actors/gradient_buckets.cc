#include "actors/gradient_buckets.h"

namespace troupe::actors {

GradientBuckets::GradientBuckets(const nn::GPTParamLayout& layout, size_t bucket_elements,
                                 size_t first) {
  const int L = layout.num_layers();
  // Phase boundaries in the order backward finishes them: the final LayerNorm
  // [block_begin(L), n), each block, then the embeddings [first, block_begin(0)).
  std::vector<size_t> starts;
  starts.push_back(layout.block_begin(L));
  for (int l = L - 1; l >= 0; --l)
    starts.push_back(layout.block_begin(l));
  starts.push_back(first);
  size_t end = layout.num_params();
  for (size_t i = 0; i < starts.size(); ++i) {
    bool last = i + 1 == starts.size();
    if (end - starts[i] >= bucket_elements || last) {
      if (end > starts[i]) buckets_.push_back({starts[i], end});
      end = starts[i];
    }
  }
}

std::vector<size_t> GradientBuckets::ready(size_t final_from) {
  std::vector<size_t> out;
  while (next_ < buckets_.size() && buckets_[next_].begin >= final_from)
    out.push_back(next_++);
  return out;
}

}  // namespace troupe::actors
