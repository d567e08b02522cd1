#include "core/detail/future_state.h"

#include "core/detail/futex.h"
#include "core/executor.h"

namespace troupe::detail {
namespace {
constexpr int kSpinBeforeBlocking = 256;
}

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

bool FutureStateBase::wait(absl::Time deadline) {
  for (int i = 0; i < kSpinBeforeBlocking; ++i) {
    if (ready()) return true;
    cpu_relax();
  }
  BlockingRegion region;
  uint32_t s = state_.fetch_or(kHasWaiter, std::memory_order_acq_rel) | kHasWaiter;
  while ((s & kReady) == 0) {
    if (!futex_wait(&state_, s, deadline)) return ready();
    s = state_.load(std::memory_order_acquire);
  }
  return true;
}

}  // namespace troupe::detail
