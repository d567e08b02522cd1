#include "core/detail/message_pool.h"

#include <array>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <new>
#include <vector>

#include "core/detail/spinlock.h"

namespace troupe::detail {
namespace {

constexpr size_t kGranule = 64;
constexpr size_t kClasses = kMaxPooledSize / kGranule;  // 64, 128, ..., 512 bytes
constexpr int kBatch = 64;                              // blocks moved at once
constexpr size_t kSlabBytes = 256 * 1024;

struct FreeBlock {
  FreeBlock* next;
};

// Blocks linked through FreeBlock::next: kBatch of them, or fewer for what a
// thread hands back as it exits.
struct Batch {
  FreeBlock* head = nullptr;
  int count = 0;
};

size_t class_of(size_t size) {
  return (size + kGranule - 1) / kGranule - 1;
}
size_t class_size(size_t c) {
  return (c + 1) * kGranule;
}

// The shared side: full batches per class, and fresh slabs.
class Central {
 public:
  Batch take_batch(size_t c) {
    {
      std::lock_guard<SpinLock> lock(mu_[c]);
      if (!batches_[c].empty()) {
        Batch b = batches_[c].back();
        batches_[c].pop_back();
        return b;
      }
    }
    return carve(c);
  }
  void give_batch(size_t c, Batch b) {
    std::lock_guard<SpinLock> lock(mu_[c]);
    batches_[c].push_back(b);
  }

 private:
  // A new batch cut from a fresh slab.
  Batch carve(size_t c) {
    size_t size = class_size(c);
    size_t bytes = size * kBatch;
    std::lock_guard<SpinLock> lock(slab_mu_);
    if (slab_left_ < bytes) {
      slab_ = static_cast<char*>(std::aligned_alloc(kGranule, kSlabBytes));
      if (slab_ == nullptr) throw std::bad_alloc();
      slab_left_ = kSlabBytes;
    }
    char* base = slab_;
    slab_ += bytes;
    slab_left_ -= bytes;
    for (int i = 0; i < kBatch; ++i) {
      auto* b = reinterpret_cast<FreeBlock*>(base + size * i);
      b->next = i + 1 < kBatch ? reinterpret_cast<FreeBlock*>(base + size * (i + 1)) : nullptr;
    }
    return Batch{reinterpret_cast<FreeBlock*>(base), kBatch};
  }

  std::array<SpinLock, kClasses> mu_;
  std::array<std::vector<Batch>, kClasses> batches_;
  SpinLock slab_mu_;
  char* slab_ = nullptr;
  size_t slab_left_ = 0;
};

Central& central() {
  static Central* c = new Central;  // never destroyed: threads free into it at exit
  return *c;
}

// Per-thread free lists. Invariants: count_[c] is the length of the list at
// head_[c], and is below 2 * kBatch after every call.
class ThreadCache {
 public:
  ~ThreadCache() {
    for (size_t c = 0; c < kClasses; ++c) {
      while (count_[c] > 0)
        release_batch(c);
    }
  }

  void* allocate(size_t c) {
    if (head_[c] == nullptr) {
      Batch b = central().take_batch(c);
      head_[c] = b.head;
      count_[c] = b.count;
    }
    FreeBlock* b = head_[c];
    head_[c] = b->next;
    --count_[c];
    return b;
  }

  void free(void* p, size_t c) {
    auto* b = static_cast<FreeBlock*>(p);
    b->next = head_[c];
    head_[c] = b;
    if (++count_[c] >= 2 * kBatch) release_batch(c);
  }

 private:
  // Hands up to kBatch blocks from the front of the list to the central pool.
  void release_batch(size_t c) {
    FreeBlock* first = head_[c];
    FreeBlock* last = first;
    int n = 1;
    while (n < kBatch && last->next != nullptr) {
      last = last->next;
      ++n;
    }
    head_[c] = last->next;
    last->next = nullptr;
    count_[c] -= n;
    central().give_batch(c, Batch{first, n});
  }

  std::array<FreeBlock*, kClasses> head_{};
  std::array<int, kClasses> count_{};
};

ThreadCache& thread_cache() {
  thread_local ThreadCache cache;
  return cache;
}

}  // namespace

void* pool_allocate(size_t size) {
  if (size > kMaxPooledSize) return ::operator new(size);
  return thread_cache().allocate(class_of(size));
}

void pool_free(void* p, size_t size) noexcept {
  if (p == nullptr) return;
  if (size > kMaxPooledSize) {
    ::operator delete(p);
    return;
  }
  thread_cache().free(p, class_of(size));
}

}  // namespace troupe::detail
