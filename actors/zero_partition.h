// How ZeRO splits a stage's parameters across its data-parallel ranks: as
// DeepSpeed splits its flat buffer, into dp contiguous parts of
// ceil(n / dp) elements, the last ones shorter (or empty) where DeepSpeed
// pads. Rank r owns part r: the fp32 masters and optimizer state of it
// (ZeRO-1), its reduced gradients (ZeRO-2), its parameters (ZeRO-3).
//
//   ZeroPartition part(plan.params, dp, rank);
//   part.own()                      this rank's range
//   part.counts(b, e)               how [b, e) falls to the ranks: the block
//                                   sizes of a reduce_scatter_v / allgather_v
//                                   of that range
#pragma once

#include <cstddef>
#include <vector>

#include "nn/optim/param_range.h"

namespace troupe::actors {

class ZeroPartition {
 public:
  ZeroPartition() = default;
  // REQUIRES: dp >= 1, 0 <= rank < dp.
  ZeroPartition(nn::ParamRange whole, int dp, int rank);

  const nn::ParamRange& whole() const { return whole_; }
  int dp() const { return dp_; }
  int rank() const { return rank_; }
  // Elements per part, before the last parts are cut short: ceil(n / dp).
  size_t part_size() const { return part_size_; }
  // Rank r's part; the parts tile whole() in rank order.
  nn::ParamRange of(int r) const;
  nn::ParamRange own() const { return of(rank_); }
  // [begin, end) intersected with each rank's part, in rank order: the sizes
  // add up to end - begin. REQUIRES: [begin, end) within whole().
  std::vector<size_t> counts(size_t begin, size_t end) const;
  // The part of [begin, end) that this rank owns (possibly empty, at its
  // place in the range).
  nn::ParamRange own_in(size_t begin, size_t end) const;

 private:
  nn::ParamRange whole_;
  int dp_ = 1;
  int rank_ = 0;
  size_t part_size_ = 0;
};

}  // namespace troupe::actors
