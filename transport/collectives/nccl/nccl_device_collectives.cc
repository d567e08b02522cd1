// NCCL's backend of collective groups' device buffers (device_collectives.h):
// NcclCommunicator behind DeviceCommunicator, and the CUDA runtime for where
// a pointer lives, a device's UUID and the staging copies. libtroupe_nccl
// exports it as troupe_nccl_device_collectives(); troupe_transport loads the
// library the first time a group is formed with a device.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "transport/collectives/device_collectives.h"
#include "transport/collectives/nccl/detail/nccl_state.h"
#include "transport/collectives/nccl/nccl_communicator.h"

namespace troupe::transport {
namespace {

// Makes `device` the calling thread's current CUDA device, and leaves it so.
// Every thread that calls in here works for one group member, on its one
// device; the calls below that make a device current for a moment restore
// the one before, and restoring the default (0) on a thread that never chose
// one would start a context there, on a GPU the member does not use.
void use_device(int device) {
  int current = -1;
  if (cudaGetDevice(&current) != cudaSuccess || current != device) (void)cudaSetDevice(device);
}

class NcclOperation final : public DeviceOperation {
 public:
  NcclOperation(NcclWork work, int device) : work_(std::move(work)), device_(device) {}
  std::optional<absl::Status> poll() override {
    use_device(device_);
    return work_.poll();
  }

 private:
  NcclWork work_;
  const int device_;
};

// Every operation on the communicator's own stream, so that they run in
// issue order.
class NcclDeviceCommunicator final : public DeviceCommunicator {
 public:
  explicit NcclDeviceCommunicator(std::unique_ptr<NcclCommunicator> comm)
      : comm_(std::move(comm)) {}
  ~NcclDeviceCommunicator() override { use_device(comm_->device()); }

  std::unique_ptr<DeviceOperation> allreduce(DType type, ReduceOp op, void* data,
                                             size_t count) override {
    after_device_work();
    return operation(comm_->allreduce(data, data, count, type, op));
  }
  std::unique_ptr<DeviceOperation> reduce_scatter(DType type, ReduceOp op, const void* input,
                                                  void* output, size_t count) override {
    after_device_work();
    return operation(comm_->reduce_scatter(input, output, count, type, op));
  }
  std::unique_ptr<DeviceOperation> allgather(const void* input, void* output,
                                             size_t bytes) override {
    after_device_work();
    return operation(comm_->allgather_bytes(input, output, bytes));
  }
  std::unique_ptr<DeviceOperation> broadcast(void* data, size_t bytes, int root) override {
    after_device_work();
    return operation(comm_->broadcast_bytes(data, data, bytes, root));
  }
  std::unique_ptr<DeviceOperation> send(int peer, const void* data, size_t bytes) override {
    after_device_work();
    return operation(comm_->send_bytes(data, bytes, peer));
  }
  std::unique_ptr<DeviceOperation> recv(int peer, void* data, size_t bytes) override {
    after_device_work();
    return operation(comm_->recv_bytes(data, bytes, peer));
  }
  void abort(const absl::Status& why) override {
    use_device(comm_->device());
    comm_->abort(why);
  }
  absl::Status failure() const override { return comm_->failure(); }

 private:
  // The communicator's stream waits for the work already queued on the device's blocking streams
  // (troupe's compute streams are: nn/cuda/backend.cc), so that an operation reads what the
  // kernels before it wrote: an event recorded on the legacy default stream completes after all
  // of that work, and the communicator's stream waits for it without holding up the host.
  void after_device_work() {
    use_device(comm_->device());
    cudaEvent_t queued = nullptr;
    if (cudaEventCreateWithFlags(&queued, cudaEventDisableTiming) != cudaSuccess) {
      (void)cudaGetLastError();
      (void)cudaDeviceSynchronize();  // no event: the host waits instead
      return;
    }
    (void)cudaEventRecord(queued, cudaStreamLegacy);
    (void)cudaStreamWaitEvent(comm_->stream(), queued, 0);
    (void)cudaEventDestroy(queued);  // released once the wait is done with it
  }

  std::unique_ptr<DeviceOperation> operation(NcclWork work) {
    return std::make_unique<NcclOperation>(std::move(work), comm_->device());
  }

  const std::unique_ptr<NcclCommunicator> comm_;
};

class NcclDeviceCollectives final : public DeviceCollectives {
 public:
  std::string name() override { return absl::StrCat("NCCL ", nccl_version()); }

  absl::Status check_device(int device) override {
    int count = 0;
    if (cudaError_t code = cudaGetDeviceCount(&count); code != cudaSuccess) {
      (void)cudaGetLastError();
      return absl::FailedPreconditionError(
          absl::StrCat("no usable CUDA device: ", cudaGetErrorName(code), " (",
                       cudaGetErrorString(code), "; is there an NVIDIA GPU and driver here?)"));
    }
    if (count == 0) return absl::FailedPreconditionError("this machine has no CUDA device");
    if (device < 0 || device >= count) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cuda:", device, " asked for, ", count, " CUDA device", count == 1 ? "" : "s", " here"));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::string> device_uuid(int device) override {
    cudaDeviceProp prop;
    if (cudaError_t code = cudaGetDeviceProperties(&prop, device); code != cudaSuccess) {
      return detail::cuda_status(code, absl::StrCat("reading cuda:", device, "'s properties"));
    }
    // As nvidia-smi writes it: GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx.
    const auto* b = reinterpret_cast<const unsigned char*>(prop.uuid.bytes);
    char text[64];
    std::snprintf(text, sizeof(text),
                  "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                  b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
                  b[14], b[15]);
    return std::string(text);
  }

  int device_of(const void* data, int device) override {
    if (data == nullptr) return kHostMemory;
    use_device(device);
    cudaPointerAttributes attributes;
    if (cudaPointerGetAttributes(&attributes, data) != cudaSuccess) {
      (void)cudaGetLastError();  // not an address CUDA knows: host memory
      return kHostMemory;
    }
    if (attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged) {
      return attributes.device;
    }
    return kHostMemory;
  }

  absl::Status copy_to_host(void* host, const void* device_data, size_t bytes,
                            int device) override {
    use_device(device);
    if (cudaError_t code = cudaMemcpy(host, device_data, bytes, cudaMemcpyDeviceToHost);
        code != cudaSuccess) {
      return detail::cuda_status(
          code, absl::StrCat("copying ", bytes, " bytes from cuda:", device, " to host memory"));
    }
    return absl::OkStatus();
  }

  absl::Status copy_to_device(void* device_data, const void* host, size_t bytes,
                              int device) override {
    use_device(device);
    cudaError_t code = cudaMemcpy(device_data, host, bytes, cudaMemcpyHostToDevice);
    // From pageable memory cudaMemcpy may return before the copy lands.
    if (code == cudaSuccess) code = cudaStreamSynchronize(cudaStreamLegacy);
    if (code != cudaSuccess) {
      return detail::cuda_status(
          code, absl::StrCat("copying ", bytes, " bytes from host memory to cuda:", device));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::unique_ptr<DeviceCommunicator>> create_communicator(
      Store& store, const DeviceCommunicatorOptions& options) override {
    use_device(options.device);
    absl::StatusOr<std::unique_ptr<NcclCommunicator>> comm =
        NcclCommunicator::create(store, {.rank = options.rank,
                                         .size = options.size,
                                         .group = options.group,
                                         .generation = options.generation,
                                         .device = options.device,
                                         .timeout = options.timeout});
    if (!comm.ok()) return comm.status();
    return std::make_unique<NcclDeviceCommunicator>(*std::move(comm));
  }
};

}  // namespace
}  // namespace troupe::transport

extern "C" troupe::transport::DeviceCollectives* troupe_nccl_device_collectives(uint32_t version) {
  if (version != troupe::transport::kDeviceCollectivesVersion) return nullptr;
  // Never destroyed: used until the process exits.
  static auto* backend = new troupe::transport::NcclDeviceCollectives();
  return backend;
}
