#include "transport/collectives/nccl/detail/nccl_state.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace troupe::transport::detail {

absl::Status cuda_status(cudaError_t code, absl::string_view what) {
  std::string message =
      absl::StrCat(what, ": ", cudaGetErrorName(code), " (", cudaGetErrorString(code), ")");
  switch (code) {
    case cudaSuccess:
      return absl::OkStatus();
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevice:
    case cudaErrorInvalidDevicePointer:
    case cudaErrorInvalidResourceHandle:
      return absl::InvalidArgumentError(message);
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorDevicesUnavailable:
      return absl::FailedPreconditionError(message);
    case cudaErrorMemoryAllocation:
      return absl::ResourceExhaustedError(message);
    default:
      return absl::InternalError(message);
  }
}

absl::Status nccl_status(ncclResult_t code, absl::string_view what) {
  std::string message = absl::StrCat(what, ": ", ncclGetErrorString(code));
  // NCCL's last warning, when it kept one, says which call failed and why.
  const char* last = ncclGetLastError(nullptr);
  if (last != nullptr && last[0] != '\0') absl::StrAppend(&message, " (", last, ")");
  switch (code) {
    case ncclSuccess:
      return absl::OkStatus();
    case ncclSystemError:
    case ncclRemoteError:
      return absl::UnavailableError(message);
    case ncclInvalidArgument:
      return absl::InvalidArgumentError(message);
    case ncclInvalidUsage:
      return absl::FailedPreconditionError(message);
    default:
      return absl::InternalError(message);
  }
}

DeviceGuard::DeviceGuard(int device) {
  cudaError_t code = cudaGetDevice(&previous_);
  if (code == cudaSuccess && previous_ != device) code = cudaSetDevice(device);
  if (code != cudaSuccess) {
    previous_ = -1;
    status_ = cuda_status(code, absl::StrCat("making CUDA device ", device, " current"));
  }
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0) (void)cudaSetDevice(previous_);
}

NcclState::NcclState(ncclComm_t comm, int device, std::string name)
    : device_(device), name_(std::move(name)), comm_(comm) {}

NcclState::~NcclState() {
  std::lock_guard<std::mutex> lock(comm_mu_);
  if (comm_ != nullptr) {
    abort_locked(absl::AbortedError(absl::StrCat(name_, ": destroyed without close()")));
  }
}

absl::StatusOr<cudaEvent_t> NcclState::issue(
    absl::string_view op, cudaStream_t stream, absl::Time deadline,
    absl::FunctionRef<ncclResult_t(ncclComm_t, cudaStream_t)> call) {
  DeviceGuard guard(device_);
  if (!guard.status().ok()) return guard.status();
  std::lock_guard<std::mutex> lock(comm_mu_);
  if (absl::Status failed = failure(); !failed.ok()) return failed;
  if (comm_ == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(name_, ": ", op, " after close"));
  }
  ncclResult_t result = call(comm_, stream);
  if (result != ncclSuccess && result != ncclInProgress) {
    absl::Status status = nccl_status(result, absl::StrCat(name_, ": ", op));
    abort_locked(status);
    return status;
  }
  if (result == ncclInProgress) {
    if (absl::Status status = settle(op, deadline); !status.ok()) return status;
  }
  // The operation is on the stream now; the event marks its end.
  cudaEvent_t event = nullptr;
  cudaError_t code = cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
  if (code == cudaSuccess) {
    code = cudaEventRecord(event, stream);
    if (code != cudaSuccess) (void)cudaEventDestroy(event);
  }
  if (code != cudaSuccess) {
    absl::Status status =
        cuda_status(code, absl::StrCat(name_, ": recording the completion of ", op));
    abort_locked(status);
    return status;
  }
  return event;
}

absl::Status NcclState::settle(absl::string_view what, absl::Time deadline) {
  absl::Duration backoff = absl::Microseconds(20);
  while (true) {
    ncclResult_t state = ncclInProgress;
    if (ncclResult_t result = ncclCommGetAsyncError(comm_, &state); result != ncclSuccess) {
      state = result;
    }
    if (state == ncclSuccess) return absl::OkStatus();
    if (state != ncclInProgress) {
      absl::Status status = nccl_status(state, absl::StrCat(name_, ": ", what));
      abort_locked(status);
      return status;
    }
    if (abort_requested_.load(std::memory_order_acquire)) {
      // abort() is waiting for comm_mu_ and will call ncclCommAbort.
      return absl::AbortedError(absl::StrCat(name_, ": aborted during ", what));
    }
    if (absl::Now() >= deadline) {
      absl::Status status = absl::DeadlineExceededError(absl::StrCat(
          name_, ": ", what,
          " was still in progress at its deadline (are all ranks calling it, with the same "
          "arguments?); the communicator is aborted"));
      abort_locked(status);
      return status;
    }
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, absl::Milliseconds(1));
  }
}

absl::Status NcclState::check(absl::string_view op) {
  std::unique_lock<std::mutex> lock(comm_mu_, std::try_to_lock);
  if (!lock.owns_lock() || comm_ == nullptr) return failure();
  ncclResult_t state = ncclSuccess;
  if (ncclResult_t result = ncclCommGetAsyncError(comm_, &state); result != ncclSuccess) {
    state = result;
  }
  if (state == ncclSuccess || state == ncclInProgress) return absl::OkStatus();
  absl::Status status = nccl_status(state, absl::StrCat(name_, ": ", op));
  abort_locked(status);
  return status;
}

absl::Status NcclState::failure() const {
  std::lock_guard<std::mutex> lock(failure_mu_);
  return failure_;
}

void NcclState::abort(const absl::Status& why) {
  abort_requested_.store(true, std::memory_order_release);
  std::lock_guard<std::mutex> lock(comm_mu_);
  abort_locked(why);
}

void NcclState::abort_locked(const absl::Status& why) {
  {
    std::lock_guard<std::mutex> lock(failure_mu_);
    if (!failure_.ok()) return;
    failure_ = absl::AbortedError(absl::StrCat(name_, " was aborted: ", why.ToString()));
  }
  if (comm_ == nullptr) return;
  DeviceGuard guard(device_);
  // Returns ncclInProgress when NCCL finishes the abort in the background;
  // either way the handle must not be used again.
  (void)ncclCommAbort(comm_);
  comm_ = nullptr;
}

void NcclState::close(absl::Time deadline) {
  DeviceGuard guard(device_);
  std::lock_guard<std::mutex> lock(comm_mu_);
  if (comm_ == nullptr) return;
  ncclResult_t result = ncclCommFinalize(comm_);
  if (result != ncclSuccess && result != ncclInProgress) {
    abort_locked(nccl_status(result, absl::StrCat(name_, ": ncclCommFinalize")));
    return;
  }
  if (result == ncclInProgress && !settle("ncclCommFinalize", deadline).ok()) return;
  (void)ncclCommDestroy(comm_);
  comm_ = nullptr;
}

}  // namespace troupe::transport::detail
