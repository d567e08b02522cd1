// Actors shared by the core tests.
#pragma once

#include <atomic>
#include <map>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/actor.h"
#include "core/detail/futex.h"

namespace troupe::testing {

class Counter {
 public:
  explicit Counter(int start = 0) : value_(start) {}
  int add(int n) { return value_ += n; }
  int get() const { return value_; }
  void reset() { value_ = 0; }
  absl::Status check_positive(int n) const {
    if (n <= 0) return absl::InvalidArgumentError("not positive");
    return absl::OkStatus();
  }
  absl::StatusOr<int> divide(int by) const {
    if (by == 0) return absl::InvalidArgumentError("division by zero");
    return value_ / by;
  }
  std::string describe(const std::string& prefix) const { return prefix + std::to_string(value_); }
  int boom() { throw std::runtime_error("counter exploded"); }

 private:
  int value_;
};
TROUPE_ACTOR(Counter, &Counter::add, &Counter::get, &Counter::reset, &Counter::check_positive,
             &Counter::divide, &Counter::describe, &Counter::boom);

// Records, per sender, the sequence numbers it receives, and counts those
// that arrive out of order.
class SequenceChecker {
 public:
  void record(int sender, int sequence) {
    int& last = last_[sender];
    if (sequence != last + 1) ++out_of_order_;
    last = sequence;
    ++received_;
  }
  int out_of_order() const { return out_of_order_; }
  int received() const { return received_; }

 private:
  std::map<int, int> last_;  // sender -> last sequence seen (starts at 0)
  int out_of_order_ = 0;
  int received_ = 0;
};
TROUPE_ACTOR(SequenceChecker, &SequenceChecker::record, &SequenceChecker::out_of_order,
             &SequenceChecker::received);

// A gate a test opens from outside; an actor method can wait on it.
class Gate {
 public:
  void open() {
    open_.store(1, std::memory_order_release);
    detail::futex_wake(&open_, INT32_MAX);
  }
  // Waits until opened or the deadline; returns whether it opened.
  bool wait(absl::Duration timeout) {
    entered_.fetch_add(1, std::memory_order_release);
    detail::futex_wake(&entered_, INT32_MAX);
    absl::Time deadline = absl::Now() + timeout;
    while (open_.load(std::memory_order_acquire) == 0) {
      if (!detail::futex_wait(&open_, 0, deadline)) return open_.load() != 0;
    }
    return true;
  }
  // Waits until `n` waiters have arrived at the gate, or the deadline.
  bool wait_entered(uint32_t n, absl::Duration timeout = absl::Seconds(30)) {
    absl::Time deadline = absl::Now() + timeout;
    for (uint32_t seen = entered_.load(); seen < n; seen = entered_.load()) {
      if (!detail::futex_wait(&entered_, seen, deadline)) return entered_.load() >= n;
    }
    return true;
  }

 private:
  std::atomic<uint32_t> open_{0};
  std::atomic<uint32_t> entered_{0};
};

class GatedWorker {
 public:
  explicit GatedWorker(Gate* gate) : gate_(gate) {}
  bool wait_for_gate() { return gate_->wait(absl::Seconds(30)); }
  int echo(int v) { return v; }
  std::thread::id thread() const { return std::this_thread::get_id(); }

 private:
  Gate* gate_;
};
TROUPE_ACTOR(GatedWorker, &GatedWorker::wait_for_gate, &GatedWorker::echo, &GatedWorker::thread);

}  // namespace troupe::testing
