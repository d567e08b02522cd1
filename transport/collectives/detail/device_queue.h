// The operations of a group's device communicator as Works: each is issued
// on the caller's thread at once (onto the device, in issue order) and its
// Work finishes when the device has completed it, seen by a thread of the
// queue's own that polls the operations in issue order - so callers wait
// for device work as for host work (CollectiveGroup::wait, pending lists).
//
// The communicator and the group's host Group are one group: the host
// group's failure (an abort, here or by a member, or a member lost) aborts
// the communicator, failing its pending and later operations with Aborted;
// and the communicator's failure (the backend's error, or an operation not
// done within the timeout) aborts the host group, which tells the members.
//
// Thread-safety: every method may be called from any thread. Internal to
// RoutedGroup (routed_group.h).
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "transport/collectives/device_collectives.h"
#include "transport/collectives/group.h"
#include "transport/collectives/work.h"

namespace troupe::transport::detail {

class DeviceQueue {
 public:
  // `host` must outlive the queue. `timeout` bounds each operation's
  // completion, counted from when the one before it completed.
  DeviceQueue(std::unique_ptr<DeviceCommunicator> comm, Group& host, absl::Duration timeout);
  // Aborts the communicator if operations are still pending or the group has
  // failed (so that no member waits for this one, and nothing waits for a
  // lost member), waits for the pending Works to finish, and then destroys
  // the communicator.
  ~DeviceQueue();
  DeviceQueue(const DeviceQueue&) = delete;
  DeviceQueue& operator=(const DeviceQueue&) = delete;

  // Issues `issue(communicator)` now, after every operation submitted
  // before it; the Work finishes with the operation. Once the group has
  // failed, the Work is done at once with the failure.
  Work submit(absl::FunctionRef<std::unique_ptr<DeviceOperation>(DeviceCommunicator&)> issue);
  // The Work of the latest operation submitted (done when none was).
  Work last() const;

  // Aborts the communicator (not the host group).
  void abort(const absl::Status& why) { comm_->abort(why); }
  absl::Status failure() const { return comm_->failure(); }
  // Operations submitted so far.
  uint64_t submitted() const { return submitted_.load(); }

 private:
  struct Pending {
    std::unique_ptr<DeviceOperation> op;
    Work work;
  };
  // Polls the front operation until it is done, or the host group fails, or
  // the timeout passes; returns its status.
  absl::Status complete(DeviceOperation& op);
  void run();

  const std::unique_ptr<DeviceCommunicator> comm_;
  Group& host_;
  const absl::Duration timeout_;
  std::mutex issue_mu_;  // held across issuing and queueing, so that the queue is in issue order
  mutable std::mutex mu_;
  std::condition_variable queued_;
  std::deque<Pending> pending_;                    // under mu_; the front is being polled
  Work last_ = Work::done_with(absl::OkStatus());  // under mu_
  bool stopping_ = false;                          // under mu_
  std::atomic<uint64_t> submitted_{0};
  std::thread completer_;  // last: started once the rest is ready
};

}  // namespace troupe::transport::detail
