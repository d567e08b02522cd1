// Buffer: an owned, contiguous, 64-byte-aligned run of bytes. It is what
// transports move between processes out of band (tensors, large payloads);
// layers above wrap their own storage in it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace troupe::transport {

class Buffer {
 public:
  static constexpr size_t kAlignment = 64;

  Buffer() = default;
  // Uninitialised storage for `size` bytes. Throws std::bad_alloc on failure.
  explicit Buffer(size_t size);
  static Buffer copy_of(std::span<const std::byte> bytes);

  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer();

  std::byte* data() { return data_; }
  const std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  std::span<std::byte> bytes() { return {data_, size_}; }
  std::span<const std::byte> bytes() const { return {data_, size_}; }

 private:
  std::byte* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace troupe::transport
