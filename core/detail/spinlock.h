#pragma once

#include <atomic>

#include "core/detail/futex.h"

namespace troupe::detail {

// Test-and-test-and-set lock for critical sections of a few instructions
// (run-queue links). Satisfies Lockable.
class SpinLock {
 public:
  void lock() {
    while (locked_.exchange(true, std::memory_order_acquire)) {
      while (locked_.load(std::memory_order_relaxed))
        cpu_relax();
    }
  }
  bool try_lock() {
    return !locked_.load(std::memory_order_relaxed) &&
           !locked_.exchange(true, std::memory_order_acquire);
  }
  void unlock() { locked_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> locked_{false};
};

}  // namespace troupe::detail
