// The device seam of collective groups: what a group asks of a backend for
// buffers in device memory. NCCL's backend (libtroupe_nccl, beside
// libtroupe_transport) implements it; troupe_transport loads it with dlopen
// the first time a group is formed with a device, so that a process that
// never asks for one maps neither NCCL nor the CUDA runtime.
//
//   absl::StatusOr<DeviceCollectives*> nccl = device_collectives();  // loads it
//   if ((*nccl)->device_of(grads) == 0) ...                          // on cuda:0
//
// A DeviceCommunicator is one rank's part of a group of `size` ranks, one
// device each, formed through the rendezvous Store; its operations are
// asynchronous, run one at a time in the order they were issued, and every
// rank must issue the same ones in the same order with the same sizes (as
// NCCL's). Buffers are device pointers on the communicator's device, ready
// when the operation is issued (work that wrote them has completed), and
// stay untouched until it is done. RoutedGroup (routed_group.h) is what
// callers use: it routes each operation by where its buffers live.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "transport/collectives/dtype.h"
#include "transport/collectives/reduce.h"
#include "transport/collectives/store.h"

namespace troupe::transport {

// device_of's answer for memory that is not a device's (pageable or pinned
// host memory): the host transports read it.
inline constexpr int kHostMemory = -1;

struct DeviceCommunicatorOptions {
  int rank = 0;
  int size = 1;
  // The backend's keys in the store are under "<group>/<generation>/".
  std::string group;
  uint64_t generation = 0;
  int device = 0;  // this rank's device ordinal (the CUDA runtime's)
  // Bounds the rendezvous and the backend's initialization together, and
  // then the issuing of each operation (not its completion: the caller
  // bounds that, polling).
  absl::Duration timeout = absl::Seconds(30);
};

// One operation issued on a DeviceCommunicator.
class DeviceOperation {
 public:
  virtual ~DeviceOperation() = default;
  // Never blocks: nullopt while the operation runs, its status once it has
  // completed or failed. Errors: InvalidArgument (arguments that cannot be
  // right; the communicator stays usable); Aborted once the communicator was
  // aborted, even for an operation that had completed (its output is not to
  // be trusted); the backend's error for a lost peer (Unavailable) or
  // anything else (Internal), after which the communicator is aborted.
  virtual std::optional<absl::Status> poll() = 0;
};

class DeviceCommunicator {
 public:
  // Finalizes the communicator (flushing what was issued, up to the
  // timeout), or, once aborted, releases it at once. Never waits for other
  // ranks past the timeout.
  virtual ~DeviceCommunicator() = default;

  // Each returns a handle (never null); an operation that cannot be issued
  // comes back already failed. Counts are in elements, sizes in bytes.
  //
  // data[0, count) = op over all ranks, in place.
  virtual std::unique_ptr<DeviceOperation> allreduce(DType type, ReduceOp op, void* data,
                                                     size_t count) = 0;
  // input: size blocks of count elements; output (count) = op over block rank.
  virtual std::unique_ptr<DeviceOperation> reduce_scatter(DType type, ReduceOp op,
                                                          const void* input, void* output,
                                                          size_t count) = 0;
  // output (size * bytes) = every rank's input, in rank order.
  virtual std::unique_ptr<DeviceOperation> allgather(const void* input, void* output,
                                                     size_t bytes) = 0;
  virtual std::unique_ptr<DeviceOperation> broadcast(void* data, size_t bytes, int root) = 0;
  // Point to point: a send and the peer's recv of the same size match in the
  // order each rank issued them (there are no tags). peer == rank is
  // InvalidArgument.
  virtual std::unique_ptr<DeviceOperation> send(int peer, const void* data, size_t bytes) = 0;
  virtual std::unique_ptr<DeviceOperation> recv(int peer, void* data, size_t bytes) = 0;

  // Stops the operations running on the device (ncclCommAbort); every
  // pending and later one fails with Aborted naming `why`. Local: the other
  // ranks are not told. Thread-safe, idempotent.
  virtual void abort(const absl::Status& why) = 0;
  // OK, or the Aborted status every operation gets once aborted.
  virtual absl::Status failure() const = 0;
};

// The backend: the device queries and copies a group needs, and its
// communicators. Thread-safe; lives as long as the process.
class DeviceCollectives {
 public:
  virtual ~DeviceCollectives() = default;

  // "NCCL 2.28.9".
  virtual std::string name() = 0;
  // OK when `device` can be used here. FailedPrecondition saying why not (no
  // driver, no device, "cuda:3 asked for, 2 CUDA devices here").
  virtual absl::Status check_device(int device) = 0;
  // What tells one physical device from another across processes and
  // machines (the CUDA device's UUID, "GPU-5c1a..."): two ranks with the
  // same one share a device.
  virtual absl::StatusOr<std::string> device_uuid(int device) = 0;
  // The device whose memory `data` is (device or managed memory), or
  // kHostMemory (any other address, null included). `device` is the
  // caller's, the group member's: the backend's calls here and below may
  // make it the calling thread's current device, and leave it so (a member
  // uses one device; a call that restored another would start a context on
  // that one).
  virtual int device_of(const void* data, int device) = 0;
  // Copies between host memory and device memory of `device`, complete when
  // they return.
  virtual absl::Status copy_to_host(void* host, const void* device_data, size_t bytes,
                                    int device) = 0;
  virtual absl::Status copy_to_device(void* device_data, const void* host, size_t bytes,
                                      int device) = 0;
  // Rendezvous through `store` and the backend's initialization, waiting
  // until every rank has joined. Errors: InvalidArgument (options out of
  // range), FailedPrecondition (no usable device; two ranks on one device
  // where the backend refuses that), DeadlineExceeded (a rank did not come).
  virtual absl::StatusOr<std::unique_ptr<DeviceCommunicator>> create_communicator(
      Store& store, const DeviceCommunicatorOptions& options) = 0;
};

// The interface version the backend's entry point is asked for: a library of
// another build answers null.
inline constexpr uint32_t kDeviceCollectivesVersion = 1;

// NCCL's backend, loaded on the first call (libtroupe_nccl.so, beside
// libtroupe_transport, else on the loader's path). FailedPrecondition saying
// why when it cannot be: a build without NCCL, the library missing, or NCCL
// or the CUDA runtime not loadable. Never null on OK; the backend lives as
// long as the process. Thread-safe.
[[nodiscard]] absl::StatusOr<DeviceCollectives*> device_collectives();
// Whether device_collectives() has loaded the backend in this process.
bool device_collectives_loaded();

}  // namespace troupe::transport

// The backend's library exports this one C function; device_collectives()
// finds it with dlsym. Null when `version` is not its kDeviceCollectivesVersion.
extern "C" troupe::transport::DeviceCollectives* troupe_nccl_device_collectives(uint32_t version);
