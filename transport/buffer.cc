#include "transport/buffer.h"

#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

namespace troupe::transport {

Buffer::Buffer(size_t size) : size_(size) {
  if (size == 0) return;
  size_t rounded = (size + kAlignment - 1) / kAlignment * kAlignment;
  data_ = static_cast<std::byte*>(std::aligned_alloc(kAlignment, rounded));
  if (data_ == nullptr) throw std::bad_alloc();
}

Buffer Buffer::copy_of(std::span<const std::byte> bytes) {
  Buffer b(bytes.size());
  if (!bytes.empty()) std::memcpy(b.data(), bytes.data(), bytes.size());
  return b;
}

Buffer::Buffer(Buffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    std::free(data_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

Buffer::~Buffer() {
  std::free(data_);
}

}  // namespace troupe::transport
