#include "transport/collectives/detail/device_queue.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace troupe::transport::detail {

DeviceQueue::DeviceQueue(std::unique_ptr<DeviceCommunicator> comm, Group& host,
                         absl::Duration timeout)
    : comm_(std::move(comm)), host_(host), timeout_(timeout) {
  completer_ = std::thread([this] { run(); });
}

DeviceQueue::~DeviceQueue() {
  bool pending = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    pending = !pending_.empty();
  }
  if (pending) {
    comm_->abort(absl::AbortedError(
        absl::StrCat("rank ", host_.rank(), " left the group with device operations pending")));
  }
  if (absl::Status failed = host_.failed(); !failed.ok()) comm_->abort(failed);
  queued_.notify_all();
  completer_.join();
  // comm_ goes with the queue: finalized, or released at once if aborted.
}

Work DeviceQueue::submit(
    absl::FunctionRef<std::unique_ptr<DeviceOperation>(DeviceCommunicator&)> issue) {
  if (absl::Status failed = host_.failed(); !failed.ok()) {
    comm_->abort(failed);
    return Work::done_with(comm_->failure());
  }
  std::lock_guard<std::mutex> issuing(issue_mu_);
  Pending p{issue(*comm_), Work()};
  Work work = p.work;
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_.push_back(std::move(p));
    last_ = work;
  }
  submitted_.fetch_add(1);
  queued_.notify_one();
  return work;
}

Work DeviceQueue::last() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_;
}

absl::Status DeviceQueue::complete(DeviceOperation& op) {
  const absl::Time deadline = absl::Now() + timeout_;
  absl::Duration backoff = absl::Microseconds(5);
  for (;;) {
    if (std::optional<absl::Status> status = op.poll()) return *std::move(status);
    if (absl::Status failed = host_.failed(); !failed.ok()) {
      comm_->abort(failed);  // the next poll says Aborted
      continue;
    }
    if (absl::Now() >= deadline) {
      absl::Status late = absl::DeadlineExceededError(
          absl::StrCat("rank ", host_.rank(), ": a device operation did not complete within ",
                       absl::FormatDuration(timeout_),
                       " (a member may have died, hung, or not issued it); the group is aborted"));
      comm_->abort(late);
      return late;
    }
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, absl::Microseconds(500));
  }
}

void DeviceQueue::run() {
  for (;;) {
    DeviceOperation* op = nullptr;
    Work work;
    {
      std::unique_lock<std::mutex> lock(mu_);
      queued_.wait(lock, [&] { return stopping_ || !pending_.empty(); });
      if (pending_.empty()) return;
      op = pending_.front().op.get();
      work = pending_.front().work;
    }
    absl::Status status = complete(*op);
    // The communicator failed (not one operation's bad arguments): the group
    // has, and the members hear of it through the host group.
    if (absl::Status failed = comm_->failure(); !failed.ok()) host_.abort(failed);
    {
      std::lock_guard<std::mutex> lock(mu_);
      pending_.pop_front();  // `op` goes
    }
    work.finish(std::move(status));
  }
}

}  // namespace troupe::transport::detail
