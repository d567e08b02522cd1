#include "nn/optim/param_range.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace troupe::nn {

absl::Status validate_ranges(std::span<const ParamRange> ranges, size_t n) {
  size_t previous_end = 0;
  for (size_t i = 0; i < ranges.size(); ++i) {
    const ParamRange& r = ranges[i];
    if (r.begin > r.end || r.end > n) {
      return absl::InvalidArgumentError(absl::StrCat("parameter range ", i, " [", r.begin, ", ",
                                                     r.end, ") does not lie within [0, ", n, ")"));
    }
    if (r.begin < previous_end) {
      return absl::InvalidArgumentError(
          absl::StrCat("parameter range ", i, " [", r.begin, ", ", r.end,
                       ") overlaps or precedes the range before it (which ends at ", previous_end,
                       "); ranges must be sorted and disjoint"));
    }
    previous_end = r.end;
  }
  return absl::OkStatus();
}

std::vector<ParamRange> ranges_in_shard(std::span<const ParamRange> model_ranges, size_t offset,
                                        size_t n) {
  std::vector<ParamRange> out;
  const size_t shard_end = offset + n;
  for (const ParamRange& r : model_ranges) {
    size_t begin = std::max(r.begin, offset);
    size_t end = std::min(r.end, shard_end);
    if (begin < end) out.push_back({begin - offset, end - offset});
  }
  return out;
}

}  // namespace troupe::nn
