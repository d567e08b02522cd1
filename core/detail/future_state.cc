#include "core/detail/future_state.h"

#include <sched.h>

#include "absl/time/clock.h"
#include "core/detail/futex.h"
#include "core/executor.h"

namespace troupe::detail {
namespace {

constexpr int kSpinBeforeBlocking = 256;
// A waiter runs its driver this long at most, then blocks. A round trip to
// another process on the host takes tens of microseconds; a call that runs
// longer is waited for without holding a core.
constexpr absl::Duration kDriveBudget = absl::Microseconds(50);
// Idle polls between yields of the core, which the threads that answer (on
// this host) may need.
constexpr int kIdlePollsPerYield = 16;

// Whether this thread runs a driver now: a callback that runs under poll()
// and waits itself does not drive again.
thread_local bool tls_driving = false;

}  // namespace

void FutureStateBase::attach(Continuation* c) {
  continuation_ = c;
  uint32_t previous = state_.fetch_or(kHasContinuation, std::memory_order_acq_rel);
  if (previous & kReady) c->on_ready();
}

void FutureStateBase::publish() {
  uint32_t previous = state_.fetch_or(kReady, std::memory_order_acq_rel);
  if (previous & kHasContinuation) continuation_->on_ready();
  if (previous & kHasWaiter) futex_wake(&state_, INT32_MAX);
}

void FutureStateBase::drive_with(std::weak_ptr<WaitDriver> driver) {
  uint32_t previous = state_.fetch_or(kSettingDriver, std::memory_order_acq_rel);
  if (previous & (kSettingDriver | kHasWaiter | kReady)) return;
  driver_ = std::move(driver);
  state_.fetch_or(kHasDriver, std::memory_order_release);
}

bool FutureStateBase::wait(absl::Time deadline) {
  if ((state_.load(std::memory_order_acquire) & kHasDriver) != 0 && !tls_driving) {
    if (std::shared_ptr<WaitDriver> driver = driver_.lock()) {
      if (drive(*driver, deadline)) return true;
    }
  } else {
    for (int i = 0; i < kSpinBeforeBlocking; ++i) {
      if (ready()) return true;
      cpu_relax();
    }
  }
  BlockingRegion region;
  uint32_t s = state_.fetch_or(kHasWaiter, std::memory_order_acq_rel) | kHasWaiter;
  while ((s & kReady) == 0) {
    if (!futex_wait(&state_, s, deadline)) return ready();
    s = state_.load(std::memory_order_acquire);
  }
  return true;
}

bool FutureStateBase::drive(WaitDriver& driver, absl::Time deadline) {
  tls_driving = true;
  driver.begin_driving();
  bool done = false;
  absl::Time give_out = absl::InfiniteFuture();
  for (int idle = 0;;) {
    if (ready()) {
      done = true;
      break;
    }
    if (driver.poll()) {
      idle = 0;
      continue;
    }
    ++idle;
    if (idle % kIdlePollsPerYield == 0) {
      sched_yield();
    } else {
      cpu_relax();
    }
    if (idle % 8 != 0) continue;
    // The clock is read now and then; the budget starts at the first reading.
    const absl::Time now = absl::Now();
    if (give_out == absl::InfiniteFuture()) give_out = now + kDriveBudget;
    if (now >= give_out || now >= deadline) break;
  }
  driver.end_driving(/*blocking=*/!done);
  tls_driving = false;
  return done;
}

}  // namespace troupe::detail
