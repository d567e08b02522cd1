// Work: the handle of an asynchronous collective (as torch.distributed's
// Work or Gloo's async ops). The operation runs on its group's worker thread;
// the handle says when it is done and how it went. Copyable: every copy
// refers to the same operation. Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace troupe::transport {

class Work {
 public:
  // A handle that is already done with `status`.
  static Work done_with(absl::Status status);
  Work();

  // Whether the operation has finished (well or not).
  bool done() const;
  // Waits until it has finished; returns its status.
  absl::Status wait() const;
  // As wait(), but gives up after `timeout` with DeadlineExceeded; the
  // operation itself goes on (abort the group to stop it).
  absl::Status wait(absl::Duration timeout) const;

  // When the operation finished (steady clock): a wait may return much later,
  // so this is what times an operation that overlapped other work.
  // REQUIRES: done().
  std::chrono::steady_clock::time_point finished_at() const;

  // Called once by whoever runs the operation.
  void finish(absl::Status status) const;

 private:
  struct State {
    mutable std::mutex mu;
    std::condition_variable finished;
    bool done = false;
    absl::Status status;
    std::chrono::steady_clock::time_point finished_at;
  };
  std::shared_ptr<State> state_;
};

}  // namespace troupe::transport
