#include "transport/collectives/nccl/nccl_work.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "transport/collectives/nccl/detail/nccl_state.h"

namespace troupe::transport {

namespace {

absl::Status moved_from() {
  return absl::FailedPreconditionError("NcclWork: the handle was moved from");
}

}  // namespace

NcclWork::NcclWork(std::shared_ptr<detail::NcclState> state, cudaEvent_t event, const char* op)
    : state_(std::move(state)), event_(event), op_(op) {}

NcclWork::NcclWork(absl::Status failed) : failed_(std::move(failed)) {}

NcclWork::NcclWork(NcclWork&& other) noexcept
    : state_(std::move(other.state_)),
      event_(std::exchange(other.event_, nullptr)),
      op_(other.op_),
      failed_(std::exchange(other.failed_, moved_from())) {}

NcclWork& NcclWork::operator=(NcclWork&& other) noexcept {
  if (this != &other) {
    if (event_ != nullptr) (void)cudaEventDestroy(event_);
    state_ = std::move(other.state_);
    event_ = std::exchange(other.event_, nullptr);
    op_ = other.op_;
    failed_ = std::exchange(other.failed_, moved_from());
  }
  return *this;
}

NcclWork::~NcclWork() {
  // The event's resources are released once it has completed.
  if (event_ != nullptr) (void)cudaEventDestroy(event_);
}

bool NcclWork::done() const {
  if (state_ == nullptr || !state_->failure().ok()) return true;
  return cudaEventQuery(event_) != cudaErrorNotReady;
}

std::optional<absl::Status> NcclWork::poll() {
  if (state_ == nullptr) return failed_;
  if (absl::Status failed = state_->failure(); !failed.ok()) return failed;
  cudaError_t code = cudaEventQuery(event_);
  if (code == cudaSuccess) {
    // An abort makes NCCL's kernels return early, which completes the
    // event too: the result holds only if the communicator is still sound.
    if (absl::Status status = state_->check(op_); !status.ok()) return status;
    return state_->failure();
  }
  if (code != cudaErrorNotReady) {
    absl::Status status = detail::cuda_status(
        code, absl::StrCat(state_->name(), ": waiting for ", op_, " to complete"));
    state_->abort(status);
    return status;
  }
  if (absl::Status status = state_->check(op_); !status.ok()) return status;
  return std::nullopt;
}

absl::Status NcclWork::wait(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::Duration backoff = absl::Microseconds(5);
  while (true) {
    if (std::optional<absl::Status> status = poll()) return *std::move(status);
    if (absl::Now() >= deadline) {
      absl::Status status = absl::DeadlineExceededError(absl::StrCat(
          state_->name(), ": ", op_, " did not complete within ", absl::FormatDuration(timeout),
          " (a peer may have died or not called it); the communicator is aborted"));
      state_->abort(status);
      return status;
    }
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, absl::Microseconds(500));
  }
}

}  // namespace troupe::transport
