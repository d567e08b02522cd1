#include "core/detail/futex.h"
#include "absl/time/clock.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>

namespace troupe::detail {

static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));

bool futex_wait(std::atomic<uint32_t>* word, uint32_t expected, absl::Time deadline) {
  timespec ts;
  timespec* timeout = nullptr;
  if (deadline != absl::InfiniteFuture()) {
    absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return false;
    ts = absl::ToTimespec(left);
    timeout = &ts;
  }
  long rc = syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT_PRIVATE, expected,
                    timeout, nullptr, 0);
  if (rc == -1 && errno == ETIMEDOUT) return false;
  return true;
}

void futex_wake(std::atomic<uint32_t>* word, int count) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE_PRIVATE, count, nullptr, nullptr,
          0);
}

}  // namespace troupe::detail
