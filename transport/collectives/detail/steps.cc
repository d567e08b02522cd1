#include "transport/collectives/detail/steps.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace troupe::transport::detail {

absl::StatusOr<Buffer> recv_exactly(Communicator& comm, int peer, uint64_t tag, size_t bytes) {
  absl::StatusOr<Buffer> in = comm.recv(peer, tag);
  if (in.ok() && in->size() != bytes) {
    return absl::InternalError(absl::StrCat("rank ", comm.rank(), " of group ", comm.group(),
                                            ": rank ", peer, " sent ", in->size(), " bytes where ",
                                            bytes, " were expected"));
  }
  return in;
}

BorrowedSends::~BorrowedSends() = default;

Buffer BorrowedSends::borrow(const void* data, size_t bytes) {
  if (state_ == nullptr) state_ = std::make_shared<State>();
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->outstanding.fetch_add(1, std::memory_order_relaxed);
  }
  std::shared_ptr<State> state = state_;
  // The owner's pointer must not be null: a null owner means owned storage.
  std::shared_ptr<const void> owner(state.get(), [state](const void*) {
    {
      std::lock_guard<std::mutex> lock(state->mu);
      state->outstanding.fetch_sub(1, std::memory_order_release);
    }
    state->released.notify_all();
  });
  // The transports only read a send's buffers (and write a placement target's, which the caller
  // hands over writable).
  return Buffer::borrow(std::move(owner), static_cast<std::byte*>(const_cast<void*>(data)), bytes);
}

absl::Status BorrowedSends::wait(absl::Duration timeout) {
  if (state_ == nullptr) return absl::OkStatus();
  auto drained = [&] { return state_->outstanding.load(std::memory_order_acquire) == 0; };
  if (drained()) return absl::OkStatus();
  if (comm_ != nullptr) {
    for (Communicator::Spinner spin(*comm_); spin.next();) {
      if (drained()) return absl::OkStatus();
    }
  }
  std::optional<Communicator::Blocked> blocked;
  if (comm_ != nullptr) blocked.emplace(*comm_);
  std::unique_lock<std::mutex> lock(state_->mu);
  bool done = state_->released.wait_until(lock, absl::ToChronoTime(absl::Now() + timeout), drained);
  if (!done) {
    return absl::DeadlineExceededError(absl::StrCat(state_->outstanding.load(),
                                                    " sends still in flight after ",
                                                    absl::FormatDuration(timeout)));
  }
  return absl::OkStatus();
}

absl::Status finish(Communicator& comm, absl::Status status,
                    std::initializer_list<BorrowedSends*> sends) {
  if (!status.ok()) comm.abort(status);
  comm.clear_placements();  // targets no message landed in are borrowed too
  for (BorrowedSends* s : sends) {
    absl::Status drained = s->wait(comm.timeout());
    if (!drained.ok()) {
      // Only a transport that keeps a dead connection's buffers gets here.
      spdlog::error("rank {} of group {}: {}", comm.rank(), comm.group(),
                    std::string(drained.message()));
      if (status.ok()) status = drained;
    }
  }
  return status;
}

}  // namespace troupe::transport::detail
