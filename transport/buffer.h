// Buffer: a contiguous run of bytes that transports move out of band
// (tensors, large payloads). It either owns 64-byte-aligned storage, or
// borrows storage that someone else owns (a tensor's), keeping that owner
// alive until the buffer is destroyed, so that sending it copies nothing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <utility>

namespace troupe::transport {

class Buffer {
 public:
  static constexpr size_t kAlignment = 64;

  Buffer() = default;
  // Uninitialised owned storage for `size` bytes. Throws std::bad_alloc.
  explicit Buffer(size_t size);
  static Buffer copy_of(std::span<const std::byte> bytes);
  // Views `size` bytes at `data`, owned by `owner`, which is kept alive as
  // long as this Buffer. The bytes must not change while a send is in flight.
  static Buffer borrow(std::shared_ptr<const void> owner, std::byte* data, size_t size);

  // Moves are inline: a frame's delivery moves its buffers a few times.
  Buffer(Buffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)),
        size_(std::exchange(other.size_, 0)),
        owner_(std::move(other.owner_)) {}
  Buffer& operator=(Buffer&& other) noexcept {
    if (this != &other) {
      if (data_ != nullptr || owner_ != nullptr) release();
      data_ = std::exchange(other.data_, nullptr);
      size_ = std::exchange(other.size_, 0);
      owner_ = std::move(other.owner_);
    }
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() {
    if (data_ != nullptr || owner_ != nullptr) release();  // moved-from buffers cost nothing
  }

  // Makes this buffer `size` bytes long in the storage it owns, if that
  // storage holds them; its bytes are then unspecified. False, leaving it as
  // it was, if it is borrowed, empty or too small. (How a transport lays the
  // next frame into the buffers of the last: see ConnectionCallbacks.)
  bool reuse(size_t size);

  std::byte* data() { return data_; }
  const std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  bool borrowed() const { return owner_ != nullptr; }
  std::span<std::byte> bytes() { return {data_, size_}; }
  std::span<const std::byte> bytes() const { return {data_, size_}; }

 private:
  void release();  // frees or lets go of the storage; leaves the buffer empty

  std::byte* data_ = nullptr;
  size_t size_ = 0;
  std::shared_ptr<const void> owner_;  // set for borrowed storage
};

}  // namespace troupe::transport
