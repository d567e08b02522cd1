// Index ranges over a flat parameter buffer, and how a shard sees them.
//
// A model's parameters live in one flat fp32 buffer of P elements; a
// parameter shard owns the slice [offset, offset + n). Ranges that mean
// something model-wide (the biases and LayerNorm weights that AdamW must not
// decay) are stated in model coordinates and cut down to each shard here.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "absl/status/status.h"

namespace troupe::nn {

// The half-open index range [begin, end).
struct ParamRange {
  size_t begin = 0;
  size_t end = 0;

  size_t size() const { return end - begin; }
  friend bool operator==(const ParamRange&, const ParamRange&) = default;
};

// OK if every range has begin <= end <= n and the ranges are sorted by begin
// and do not overlap (touching is fine); InvalidArgument naming the first
// offending range otherwise.
[[nodiscard]] absl::Status validate_ranges(std::span<const ParamRange> ranges, size_t n);

// The parts of `model_ranges` (model coordinates, sorted, disjoint) that fall
// inside the shard [offset, offset + n), in shard coordinates (relative to
// offset), in order. Empty intersections are dropped.
std::vector<ParamRange> ranges_in_shard(std::span<const ParamRange> model_ranges, size_t offset,
                                        size_t n);

}  // namespace troupe::nn
