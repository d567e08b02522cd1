#include "transport/collectives/work.h"

#include "absl/strings/str_cat.h"

namespace troupe::transport {

Work::Work() : state_(std::make_shared<State>()) {}

Work Work::done_with(absl::Status status) {
  Work w;
  w.finish(std::move(status));
  return w;
}

bool Work::done() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->done;
}

absl::Status Work::wait() const {
  std::unique_lock<std::mutex> lock(state_->mu);
  state_->finished.wait(lock, [&] { return state_->done; });
  return state_->status;
}

absl::Status Work::wait(absl::Duration timeout) const {
  std::unique_lock<std::mutex> lock(state_->mu);
  if (!state_->finished.wait_until(lock, absl::ToChronoTime(absl::Now() + timeout),
                                   [&] { return state_->done; })) {
    return absl::DeadlineExceededError(
        absl::StrCat("collective not done within ", absl::FormatDuration(timeout)));
  }
  return state_->status;
}

std::chrono::steady_clock::time_point Work::finished_at() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->finished_at;
}

void Work::finish(absl::Status status) const {
  const auto now = std::chrono::steady_clock::now();
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (state_->done) return;
    state_->done = true;
    state_->status = std::move(status);
    state_->finished_at = now;
  }
  state_->finished.notify_all();
}

}  // namespace troupe::transport
