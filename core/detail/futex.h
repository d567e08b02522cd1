// Thin wrappers over the Linux futex syscall, used by futures, the thread pool
// and mailboxes to park threads on a 32-bit word without a mutex.
#pragma once

#include <atomic>
#include <cstdint>

#include "absl/time/time.h"

namespace troupe::detail {

// Blocks while `*word == expected`, until woken, until `deadline`, or spuriously.
// Returns false only when `deadline` has passed. Callers re-check their condition.
bool futex_wait(std::atomic<uint32_t>* word, uint32_t expected,
                absl::Time deadline = absl::InfiniteFuture());

// Wakes up to `count` threads blocked in futex_wait on `word`.
void futex_wake(std::atomic<uint32_t>* word, int count);

// A pause instruction for spin loops.
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace troupe::detail
