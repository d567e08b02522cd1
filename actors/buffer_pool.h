// Buffers a ZeRO step takes and lets go of again and again - gathered
// segments, gradient buckets - kept for the next use instead of returned to
// the allocator, which would hand them back as fresh pages (for large ones
// a page fault and a kernel zeroing for every 4 KiB, each time: about 5% of a
// ZeRO-3 step before this pool).
//
//   BufferPool pool;
//   absl::StatusOr<nn::FloatBuffer> b = pool.take(n, /*zero=*/true);
//   ... use *b ...
//   pool.give(*std::move(b));
//
// It keeps what it was given, so it holds at most what was in use at once;
// peak_bytes() counts that (in use and idle together). Not thread-safe: one
// owner.
#pragma once

#include <cstddef>
#include <vector>

#include "absl/status/statusor.h"
#include "nn/memory.h"

namespace troupe::actors {

class BufferPool {
 public:
  // Buffers of `category` on `device` (its stage's).
  explicit BufferPool(nn::MemoryCategory category = nn::MemoryCategory::kGatherBuffers,
                      nn::Device device = nn::Device::cpu())
      : category_(category), device_(device) {}
  nn::Device device() const { return device_; }

  // A buffer of exactly n floats: an idle one of that size, or a new one.
  // Zeroed when `zero`, else its contents are unspecified. ResourceExhausted
  // without the memory.
  absl::StatusOr<nn::FloatBuffer> take(size_t n, bool zero);
  // Takes `buffer` back for a later take() (an empty one is dropped).
  void give(nn::FloatBuffer buffer);
  // Frees a buffer take() made, not to be kept (one that will not be asked for again soon).
  void drop(nn::FloatBuffer buffer);
  // Frees the idle buffers.
  void clear();

  // Bytes of every buffer the pool made and has not freed: in use and idle.
  size_t bytes() const { return bytes_; }
  // The most bytes() has been since reset_peak().
  size_t peak_bytes() const { return peak_bytes_; }
  void reset_peak() { peak_bytes_ = bytes_; }

 private:
  nn::MemoryCategory category_;
  nn::Device device_;
  std::vector<nn::FloatBuffer> idle_;
  size_t bytes_ = 0;
  size_t peak_bytes_ = 0;
};

}  // namespace troupe::actors
