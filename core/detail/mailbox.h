// An actor's mailbox: many producers, one consumer (the actor).
//
// Producers push onto an intrusive lock-free stack with one CAS; the consumer
// takes the whole stack at once and reverses it, so messages come out in
// arrival order (FIFO per sender, and overall). The head also encodes the
// consumer's state: kIdle means the actor is not scheduled, so the push that
// replaces kIdle must schedule it; kClosed means the actor has terminated.
//
// Capacity is enforced by producers (wait_for_space) against a count of
// messages pushed minus messages taken by the consumer. Invariant: a mailbox
// holds at most about twice its capacity, plus one message per concurrent
// sender (the consumer's taken-but-unprocessed batch is at most one fill).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>

#include "absl/time/time.h"
#include "core/detail/message.h"

namespace troupe::detail {

class Mailbox {
 public:
  enum class PushResult { kQueued, kQueuedWasIdle, kClosed };
  enum class SpaceResult { kSpace, kTimedOut, kClosed };

  Mailbox() = default;
  Mailbox(const Mailbox&) = delete;
  Mailbox& operator=(const Mailbox&) = delete;

  // Producer side. Thread-safe.
  PushResult push(Message* m);
  // Messages pushed and not yet taken by the consumer.
  uint64_t backlog() const {
    return pushed_.load(std::memory_order_relaxed) - taken_.load(std::memory_order_seq_cst);
  }
  // Counts one more message against the capacity; call before push().
  void count_push() { pushed_.fetch_add(1, std::memory_order_relaxed); }
  // Blocks until backlog() < capacity, the deadline passes, or the mailbox closes.
  SpaceResult wait_for_space(uint64_t capacity, absl::Time deadline);
  bool closed() const { return head_.load(std::memory_order_acquire) == kClosed; }

  // Consumer side: only the thread running the actor.
  // The next message in arrival order, or null if there is none right now.
  Message* pop();
  // If nothing is queued, marks the consumer idle and returns true; the next
  // push will report kQueuedWasIdle. Otherwise returns false.
  bool try_idle();
  // Closes the mailbox; returns everything not yet popped, in arrival order.
  // Later pushes return kClosed.
  Message* close();

 private:
  static inline Message* const kIdle = reinterpret_cast<Message*>(uintptr_t{1});
  static inline Message* const kClosed = reinterpret_cast<Message*>(uintptr_t{2});

  static Message* reverse(Message* stack, uint64_t* count);
  void wake_space_waiters();    // if any wait
  void notify_space_waiters();  // unconditionally

  // Producer-written line.
  alignas(64) std::atomic<Message*> head_{kIdle};
  std::atomic<uint64_t> pushed_{0};
  // Consumer-written line.
  alignas(64) std::atomic<uint64_t> taken_{0};
  Message* cache_ = nullptr;  // taken, not yet popped, in arrival order

  // Slow path for producers waiting on a full mailbox.
  alignas(64) std::atomic<int> space_waiters_{0};
  std::mutex space_mu_;
  std::condition_variable space_cv_;
};

}  // namespace troupe::detail
