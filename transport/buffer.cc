#include "transport/buffer.h"

#include <sys/mman.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <utility>
#include <vector>

namespace troupe::transport {
namespace {

// Large buffers come and go at the rate frames arrive (a pipelined
// collective receives one per 512 KiB segment). Fresh ones from the system
// are mapped and zero-filled page by page on first touch, which costs more
// than moving their bytes - and malloc hands freed ones of these sizes back
// to the system (unmap, or trimming its heap) - so recently freed ones are
// kept for reuse: sizes from kMinCached up are rounded to a power of two,
// and each size class keeps up to kClassBytes of blocks (at least
// kMinPerClass), kMaxCachedBytes in all.
constexpr size_t kMinCached = size_t{64} << 10;
constexpr int kClasses = 48;
constexpr size_t kMinPerClass = 4;
constexpr size_t kClassBytes = size_t{128} << 20;
constexpr size_t kMaxCachedBytes = size_t{1} << 30;

class LargeBlockCache {
 public:
  static size_t class_bytes(size_t size) { return std::bit_ceil(size); }

  std::byte* take(size_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    auto& free = free_[std::countr_zero(bytes)];
    if (free.empty()) return nullptr;
    std::byte* p = free.back();
    free.pop_back();
    cached_bytes_ -= bytes;
    return p;
  }
  // Keeps `p` for reuse, or returns false if its class or the cache is full.
  bool give(std::byte* p, size_t bytes) {
    const size_t per_class = std::max(kMinPerClass, kClassBytes / bytes);
    std::lock_guard<std::mutex> lock(mu_);
    auto& free = free_[std::countr_zero(bytes)];
    if (free.size() >= per_class || cached_bytes_ + bytes > kMaxCachedBytes) return false;
    if (free.capacity() == 0) free.reserve(per_class);  // no allocation when it fills up
    free.push_back(p);
    cached_bytes_ += bytes;
    return true;
  }

 private:
  std::mutex mu_;
  std::array<std::vector<std::byte*>, kClasses> free_;
  size_t cached_bytes_ = 0;
};

LargeBlockCache& cache() {
  static LargeBlockCache* c = new LargeBlockCache;  // lives to the end: buffers may outlive main
  return *c;
}

// Blocks from this size up (always whole multiples of it: the cache's size
// classes are powers of two) are mapped on their own, aligned to it, and
// asked to be backed by huge pages (where transparent huge pages are on "madvise",
// as by default). A transport that reads a frame into one (ucx's single-copy
// rendezvous, a kernel copy page by page) then walks a few huge pages instead
// of thousands of small ones, and first touch faults in 2 MiB at a time: on
// the development machine that took ucx's 4 MiB frames from 4.7-5.0 GB/s to
// 7.2-7.6.
constexpr size_t kHugeBytes = size_t{2} << 20;

std::byte* huge_block(size_t bytes) {
  const size_t span = bytes + kHugeBytes;
  void* raw = ::mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) throw std::bad_alloc();
  const auto start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t at = (start + kHugeBytes - 1) & ~uintptr_t{kHugeBytes - 1};
  // Keep exactly [at, at + bytes): the ends go back at once.
  if (at > start) ::munmap(raw, at - start);
  if (const uintptr_t end = start + span; end > at + bytes) {
    ::munmap(reinterpret_cast<void*>(at + bytes), end - (at + bytes));
  }
  ::madvise(reinterpret_cast<void*>(at), bytes, MADV_HUGEPAGE);  // a hint: ignored where off
  return reinterpret_cast<std::byte*>(at);
}

// Smaller blocks come from malloc, over-allocated and aligned by hand, with
// malloc's pointer kept just below the aligned one. (glibc's aligned_alloc
// bypasses its per-thread caches, which costs small buffers a slow path on
// every allocation and free.)
std::byte* aligned_block(size_t bytes) {
  if (bytes >= kHugeBytes) return huge_block(bytes);
  void* raw = std::malloc(bytes + Buffer::kAlignment);
  if (raw == nullptr) throw std::bad_alloc();
  auto at = reinterpret_cast<uintptr_t>(raw) + sizeof(void*);
  at = (at + Buffer::kAlignment - 1) & ~uintptr_t{Buffer::kAlignment - 1};
  std::memcpy(reinterpret_cast<void*>(at - sizeof(void*)), &raw, sizeof(void*));
  return reinterpret_cast<std::byte*>(at);
}

// `bytes`: what aligned_block was asked for.
void free_block(std::byte* p, size_t bytes) {
  if (bytes >= kHugeBytes) {
    ::munmap(p, bytes);
    return;
  }
  void* raw;
  std::memcpy(&raw, p - sizeof(void*), sizeof(void*));
  std::free(raw);
}

size_t allocation_bytes(size_t size) {
  if (size >= kMinCached) return LargeBlockCache::class_bytes(size);
  return (size + Buffer::kAlignment - 1) / Buffer::kAlignment * Buffer::kAlignment;
}

}  // namespace

Buffer::Buffer(size_t size) : size_(size) {
  if (size == 0) return;
  size_t bytes = allocation_bytes(size);
  if (size >= kMinCached) data_ = cache().take(bytes);
  if (data_ == nullptr) data_ = aligned_block(bytes);
}

bool Buffer::reuse(size_t size) {
  if (owner_ != nullptr || data_ == nullptr || size == 0) return false;
  const size_t have = allocation_bytes(size_);
  const size_t want = allocation_bytes(size);
  // Large blocks go back to the cache by their size class, so they stay in it.
  const bool fits = size_ < kMinCached ? size < kMinCached && want <= have : want == have;
  if (fits) size_ = size;
  return fits;
}

Buffer Buffer::copy_of(std::span<const std::byte> bytes) {
  Buffer b(bytes.size());
  if (!bytes.empty()) std::memcpy(b.data(), bytes.data(), bytes.size());
  return b;
}

Buffer Buffer::borrow(std::shared_ptr<const void> owner, std::byte* data, size_t size) {
  Buffer b;
  b.data_ = data;
  b.size_ = size;
  b.owner_ = owner ? std::move(owner) : std::make_shared<int>(0);
  return b;
}

void Buffer::release() {
  if (owner_ == nullptr && data_ != nullptr) {
    const size_t bytes = allocation_bytes(size_);
    if (size_ < kMinCached || !cache().give(data_, bytes)) free_block(data_, bytes);
  }
  owner_.reset();
  data_ = nullptr;
}

}  // namespace troupe::transport
