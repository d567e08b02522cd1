// What a NcclCommunicator shares with the NcclWork handles it issues: NCCL's
// communicator handle and whether (and why) it was aborted, so that a handle
// may outlive its communicator. Also the conversions of CUDA and NCCL codes to
// absl::Status, and a guard for the current CUDA device. Internal to
// troupe_nccl (it includes nccl.h).
//
// The communicator is NCCL non-blocking (config.blocking = 0): any NCCL call
// may return ncclInProgress, and then NCCL requires that nothing else is
// called on the communicator until ncclCommGetAsyncError stops reporting
// ncclInProgress. NcclState serialises the calls (comm_mu_) and does that
// wait, bounded by a deadline and cut short by abort().
//
// Invariant: once failure_ is set it never changes, and comm_ is null
// (ncclCommAbort was called on it). comm_ is also null after close().
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <mutex>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace troupe::transport::detail {

// "<what>: <CUDA's error name> (<its message>)": InvalidArgument for bad
// values and devices, FailedPrecondition when there is no usable device or
// driver, ResourceExhausted when out of memory, Internal otherwise.
absl::Status cuda_status(cudaError_t code, absl::string_view what);

// "<what>: <NCCL's message>[ (<ncclGetLastError>)]": Unavailable for system
// and remote errors (a peer or the network went away), InvalidArgument,
// FailedPrecondition for invalid usage, Internal otherwise.
absl::Status nccl_status(ncclResult_t code, absl::string_view what);

// Makes `device` the calling thread's current CUDA device for the guard's
// lifetime, then restores the previous one.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

  // OK, or why `device` could not be made current (then nothing changed).
  const absl::Status& status() const { return status_; }

 private:
  int previous_ = -1;
  absl::Status status_;
};

class NcclState {
 public:
  // Takes `comm`, which has finished initializing on `device`. `name` says
  // which group, generation and rank it is, for error messages.
  NcclState(ncclComm_t comm, int device, std::string name);
  // Aborts the communicator if close() or abort() has not been called.
  ~NcclState();
  NcclState(const NcclState&) = delete;
  NcclState& operator=(const NcclState&) = delete;

  int device() const { return device_; }
  const std::string& name() const { return name_; }

  // Runs `call` (one NCCL operation, or a group of them) on the communicator
  // and `stream` with `device` current, waits for NCCL to have enqueued it
  // (until `deadline`), and records a new event on `stream` after it; the
  // caller owns the event. Errors: failure() once aborted; NCCL's or CUDA's
  // error, or DeadlineExceeded, after which the communicator is aborted.
  absl::StatusOr<cudaEvent_t> issue(absl::string_view op, cudaStream_t stream, absl::Time deadline,
                                    absl::FunctionRef<ncclResult_t(ncclComm_t, cudaStream_t)> call);

  // OK when NCCL reports no error (or another thread is calling NCCL right
  // now, so that it cannot ask); NCCL's asynchronous error otherwise, after
  // which the communicator is aborted. `op` names the operation waited for.
  absl::Status check(absl::string_view op);

  // OK, or the Aborted status that every operation and wait gets once the
  // communicator has been aborted.
  absl::Status failure() const;

  // ncclCommAbort, once: operations still running on the device are stopped
  // and later ones fail with Aborted naming `why`. Thread-safe; waits for a
  // NCCL call in progress on another thread to give up.
  void abort(const absl::Status& why);

  // Finalizes the communicator (flushing the operations issued, until
  // `deadline`) and destroys it; aborts it instead if that fails.
  void close(absl::Time deadline);

 private:
  // Waits while NCCL reports ncclInProgress; comm_mu_ is held. OK when NCCL
  // is done; otherwise the error, after aborting the communicator.
  absl::Status settle(absl::string_view what, absl::Time deadline);
  // Calls ncclCommAbort and records `why`; comm_mu_ is held.
  void abort_locked(const absl::Status& why);

  const int device_;
  const std::string name_;
  std::atomic<bool> abort_requested_{false};
  std::mutex comm_mu_;  // held across every NCCL call on comm_
  ncclComm_t comm_;     // guarded by comm_mu_
  mutable std::mutex failure_mu_;
  absl::Status failure_;  // guarded by failure_mu_
};

}  // namespace troupe::transport::detail
