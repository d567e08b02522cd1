// Memory for messages and future states.
//
// Messages are allocated by the sending thread and freed by the receiving
// one. General-purpose allocators handle that producer/consumer pattern poorly
// (glibc's spends more time in malloc/free than we spend delivering the
// message), so small blocks come from this pool instead: per-thread free lists
// by size class, refilled from and drained to a shared list in batches, so a
// thread takes the shared lock once per kBatch blocks. Memory is kept for reuse
// and not returned to the system; it is bounded by the peak number of messages
// in flight. Blocks larger than kMaxPooledSize go to operator new.
#pragma once

#include <cstddef>

namespace troupe::detail {

constexpr size_t kMaxPooledSize = 512;

void* pool_allocate(size_t size);
// REQUIRES: `p` came from pool_allocate(size) with the same size.
void pool_free(void* p, size_t size) noexcept;

}  // namespace troupe::detail

// Gives a class pooled operator new/delete. The sized delete receives the
// dynamic type's size through the virtual destructor.
#define TROUPE_POOLED_ALLOCATION()                                  \
  static void* operator new(std::size_t size) {                     \
    return ::troupe::detail::pool_allocate(size);                   \
  }                                                                 \
  static void operator delete(void* p, std::size_t size) noexcept { \
    ::troupe::detail::pool_free(p, size);                           \
  }
