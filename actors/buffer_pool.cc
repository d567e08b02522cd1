#include "actors/buffer_pool.h"

#include <algorithm>
#include <cstring>
#include <utility>

namespace troupe::actors {

absl::StatusOr<nn::FloatBuffer> BufferPool::take(size_t n, bool zero) {
  auto it = std::find_if(idle_.begin(), idle_.end(),
                         [&](const nn::FloatBuffer& b) { return b.size() == n; });
  if (it != idle_.end()) {
    nn::FloatBuffer b = std::move(*it);
    idle_.erase(it);
    if (zero && n > 0) {
      if (absl::Status s = nn::zero_bytes(b.data(), device_, static_cast<int64_t>(b.bytes()));
          !s.ok()) {
        return s;
      }
    }
    return b;
  }
  nn::FloatBuffer b;
  if (absl::Status s = b.reset(category_, n, zero, device_); !s.ok()) return s;
  bytes_ += b.bytes();
  peak_bytes_ = std::max(peak_bytes_, bytes_);
  return b;
}

void BufferPool::give(nn::FloatBuffer buffer) {
  if (buffer.data() == nullptr) return;
  idle_.push_back(std::move(buffer));
}

void BufferPool::drop(nn::FloatBuffer buffer) {
  bytes_ -= buffer.bytes();
  buffer.release();
}

void BufferPool::clear() {
  for (const nn::FloatBuffer& b : idle_)
    bytes_ -= b.bytes();
  idle_.clear();
}

}  // namespace troupe::actors
