#include "actors/zero_partition.h"

#include <algorithm>

namespace troupe::actors {

ZeroPartition::ZeroPartition(nn::ParamRange whole, int dp, int rank)
    : whole_(whole),
      dp_(dp),
      rank_(rank),
      part_size_((whole.size() + static_cast<size_t>(dp) - 1) / static_cast<size_t>(dp)) {}

nn::ParamRange ZeroPartition::of(int r) const {
  const size_t begin = std::min(whole_.end, whole_.begin + static_cast<size_t>(r) * part_size_);
  const size_t end = std::min(whole_.end, begin + part_size_);
  return {begin, end};
}

std::vector<size_t> ZeroPartition::counts(size_t begin, size_t end) const {
  std::vector<size_t> sizes(static_cast<size_t>(dp_));
  for (int r = 0; r < dp_; ++r) {
    const nn::ParamRange p = of(r);
    const size_t from = std::max(begin, p.begin), to = std::min(end, p.end);
    sizes[static_cast<size_t>(r)] = from < to ? to - from : 0;
  }
  return sizes;
}

nn::ParamRange ZeroPartition::own_in(size_t begin, size_t end) const {
  const nn::ParamRange p = own();
  const size_t from = std::clamp(p.begin, begin, end);
  const size_t to = std::clamp(p.end, begin, end);
  return {from, std::max(from, to)};
}

}  // namespace troupe::actors
