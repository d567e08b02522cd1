// Static splits of an index range across OpenMP threads.
#pragma once

#include <algorithm>
#include <cstdint>

namespace troupe::nn::detail {

// [begin, end) of thread tid of nth over [0, n), boundaries on multiples of align (16 floats = one
// 64-byte cache line, so that threads writing neighbouring chunks share no line). The chunks of a
// fixed (n, nth) are always the same; some may be empty.
struct Chunk {
  int64_t begin;
  int64_t end;
};
inline Chunk chunk_of(int64_t n, int tid, int nth, int64_t align = 16) {
  const int64_t units = (n + align - 1) / align;
  const int64_t begin = units * tid / nth * align;
  const int64_t end = units * (tid + 1) / nth * align;
  return {std::min(begin, n), std::min(end, n)};
}

}  // namespace troupe::nn::detail
