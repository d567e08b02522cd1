#include "core/detail/mailbox.h"

namespace troupe::detail {

Mailbox::PushResult Mailbox::push(Message* m) {
  Message* head = head_.load(std::memory_order_relaxed);
  for (;;) {
    if (head == kClosed) return PushResult::kClosed;
    m->next_ = head == kIdle ? nullptr : head;
    if (head_.compare_exchange_weak(head, m, std::memory_order_acq_rel,
                                    std::memory_order_relaxed)) {
      return head == kIdle ? PushResult::kQueuedWasIdle : PushResult::kQueued;
    }
  }
}

Message* Mailbox::reverse(Message* stack, uint64_t* count) {
  Message* fifo = nullptr;
  uint64_t n = 0;
  while (stack != nullptr) {
    Message* next = stack->next_;
    stack->next_ = fifo;
    fifo = stack;
    stack = next;
    ++n;
  }
  *count = n;
  return fifo;
}

Message* Mailbox::pop() {
  if (cache_ == nullptr) {
    if (head_.load(std::memory_order_relaxed) == nullptr) return nullptr;
    Message* stack = head_.exchange(nullptr, std::memory_order_acq_rel);
    uint64_t n = 0;
    cache_ = reverse(stack, &n);
    taken_.store(taken_.load(std::memory_order_relaxed) + n, std::memory_order_seq_cst);
    wake_space_waiters();
    if (cache_ == nullptr) return nullptr;
  }
  Message* m = cache_;
  cache_ = m->next_;
  return m;
}

bool Mailbox::try_idle() {
  if (cache_ != nullptr) return false;
  Message* expected = nullptr;
  return head_.compare_exchange_strong(expected, kIdle, std::memory_order_acq_rel,
                                       std::memory_order_relaxed);
}

Message* Mailbox::close() {
  Message* stack = head_.exchange(kClosed, std::memory_order_acq_rel);
  uint64_t n = 0;
  Message* rest = (stack == kIdle || stack == kClosed) ? nullptr : reverse(stack, &n);
  Message* all = cache_;
  cache_ = nullptr;
  if (all == nullptr) {
    all = rest;
  } else {
    Message* tail = all;
    while (tail->next_ != nullptr)
      tail = tail->next_;
    tail->next_ = rest;
  }
  { std::lock_guard<std::mutex> lock(space_mu_); }
  space_cv_.notify_all();
  return all;
}

void Mailbox::wake_space_waiters() {
  // Pairs with the seq_cst increment in wait_for_space: either the waiter sees
  // the new taken_ count, or we see it waiting.
  if (space_waiters_.load(std::memory_order_seq_cst) == 0) return;
  { std::lock_guard<std::mutex> lock(space_mu_); }
  space_cv_.notify_all();
}

Mailbox::SpaceResult Mailbox::wait_for_space(uint64_t capacity, absl::Time deadline) {
  space_waiters_.fetch_add(1, std::memory_order_seq_cst);
  SpaceResult result = SpaceResult::kSpace;
  {
    std::unique_lock<std::mutex> lock(space_mu_);
    for (;;) {
      if (closed()) {
        result = SpaceResult::kClosed;
        break;
      }
      if (backlog() < capacity) break;
      if (deadline == absl::InfiniteFuture()) {
        space_cv_.wait(lock);
      } else if (space_cv_.wait_until(lock, absl::ToChronoTime(deadline)) ==
                 std::cv_status::timeout) {
        if (closed()) {
          result = SpaceResult::kClosed;
        } else if (backlog() >= capacity) {
          result = SpaceResult::kTimedOut;
        }
        break;
      }
    }
  }
  space_waiters_.fetch_sub(1, std::memory_order_relaxed);
  return result;
}

}  // namespace troupe::detail
