// A handle on one NCCL operation enqueued on a CUDA stream by a
// NcclCommunicator (nccl_communicator.h). The operation is asynchronous: the
// call that issued it returned once it was on the stream, and later work on
// that stream is ordered after it. The handle tells the host when it has
// completed on the device, and reports the group's failures:
//
//   done()  true once wait() would return without blocking.
//   wait()  blocks until the operation completes, polling its CUDA event and
//           NCCL's asynchronous error state.
//
// A handle may outlive its communicator. It is move-only; destroying it does
// not wait for the operation.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <optional>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace troupe::transport {

namespace detail {
class NcclState;
}  // namespace detail

class [[nodiscard]] NcclWork {
 public:
  NcclWork(NcclWork&& other) noexcept;
  NcclWork& operator=(NcclWork&& other) noexcept;
  ~NcclWork();

  // True when wait() would return at once: the operation has completed on the
  // device, or it failed or the communicator was aborted.
  bool done() const;

  // Waits until the operation has completed on the device. Errors:
  //   the error the operation was issued with (InvalidArgument for arguments
  //     that cannot be right, NCCL's or CUDA's error enqueuing it);
  //   Aborted once the communicator has been aborted - by abort(), or after
  //     an error or timeout seen by any wait - even for an operation that may
  //     have completed before (after an abort its output is not to be trusted);
  //   NCCL's asynchronous error (Unavailable for a lost peer or network
  //     error, Internal otherwise), after aborting the communicator;
  //   DeadlineExceeded after `timeout`, after aborting the communicator (a
  //     peer that never calls the matching operation leaves it hanging on the
  //     device, and only an abort frees the stream).
  // Use done() or poll() to poll without that consequence.
  absl::Status wait(absl::Duration timeout);

  // Never blocks: nullopt while the operation runs on the device and NCCL
  // reports no error; otherwise what wait() would return at once (NCCL's
  // asynchronous error aborting the communicator, as there).
  std::optional<absl::Status> poll();

  // The CUDA event recorded after the operation (null when it failed to
  // issue), e.g. for cudaStreamWaitEvent on another stream. Owned by the
  // handle.
  cudaEvent_t event() const { return event_; }

 private:
  friend class NcclCommunicator;
  NcclWork(std::shared_ptr<detail::NcclState> state, cudaEvent_t event, const char* op);
  explicit NcclWork(absl::Status failed);

  std::shared_ptr<detail::NcclState> state_;  // null when the operation failed to issue
  cudaEvent_t event_ = nullptr;
  const char* op_ = "";  // "allreduce", ...: a string literal
  absl::Status failed_;  // why the operation failed to issue
};

}  // namespace troupe::transport
