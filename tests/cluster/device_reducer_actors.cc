#include "tests/cluster/device_reducer_actors.h"

#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"
#include "core/cluster/gpus.h"

namespace troupe::testing {
namespace {

absl::Status cuda_error(cudaError_t code, const char* what) {
  return absl::InternalError(
      absl::StrCat(what, ": ", cudaGetErrorName(code), " (", cudaGetErrorString(code), ")"));
}

// `count` floats of `value` in memory of the current device; the caller frees them.
absl::StatusOr<float*> device_floats(int64_t count, float value) {
  void* data = nullptr;
  const size_t bytes = static_cast<size_t>(count) * sizeof(float);
  if (cudaError_t code = cudaMalloc(&data, bytes); code != cudaSuccess) {
    return cuda_error(code, "cudaMalloc");
  }
  std::vector<float> host(static_cast<size_t>(count), value);
  cudaError_t code = cudaMemcpy(data, host.data(), bytes, cudaMemcpyHostToDevice);
  if (code == cudaSuccess) code = cudaDeviceSynchronize();  // ready before the collective
  if (code != cudaSuccess) {
    (void)cudaFree(data);
    return cuda_error(code, "uploading");
  }
  return static_cast<float*>(data);
}

}  // namespace

absl::StatusOr<std::string> DeviceReducer::join(std::string name, int device) {
  group_.reset();  // the previous generation, if any
  if (device == -2) {
    std::vector<int> gpus = cluster::gpu_ids();
    if (gpus.empty()) return absl::FailedPreconditionError("this actor holds no GPU");
    device = gpus[0];
  }
  device_ = device;
  if (cudaError_t code = cudaSetDevice(device_); code != cudaSuccess) {
    return cuda_error(code, "cudaSetDevice");
  }
  auto group = CollectiveGroup::join(name, absl::Seconds(60), device_);
  if (!group.ok()) return group.status();
  group_ = *std::move(group);
  return std::string(transport::to_string(group_->device_path()));
}

absl::StatusOr<std::vector<float>> DeviceReducer::allreduce(int64_t count) {
  if (!group_) return absl::FailedPreconditionError("not in a group");
  (void)cudaSetDevice(device_);
  absl::StatusOr<float*> data = device_floats(count, static_cast<float>(group_->rank() + 1));
  if (!data.ok()) return data.status();
  absl::Status s =
      group_->allreduce(DType::kFloat32, ReduceOp::kSum, *data, static_cast<size_t>(count));
  std::vector<float> ends(2, -1.0f);
  if (s.ok()) {
    cudaError_t code = cudaMemcpy(&ends[0], *data, sizeof(float), cudaMemcpyDeviceToHost);
    if (code == cudaSuccess) {
      code = cudaMemcpy(&ends[1], *data + count - 1, sizeof(float), cudaMemcpyDeviceToHost);
    }
    if (code != cudaSuccess) s = cuda_error(code, "reading back");
  }
  (void)cudaFree(*data);
  if (!s.ok()) return s;
  return ends;
}

absl::StatusOr<std::string> DeviceReducer::abort_alone(int64_t count, int ms) {
  if (!group_) return absl::FailedPreconditionError("not in a group");
  (void)cudaSetDevice(device_);
  absl::StatusOr<float*> data = device_floats(count, 1.0f);
  if (!data.ok()) return data.status();
  Work work =
      group_->allreduce_async(DType::kFloat32, ReduceOp::kSum, *data, static_cast<size_t>(count));
  absl::SleepFor(absl::Milliseconds(ms));
  const bool done = work.done();
  group_->abort(absl::AbortedError("aborted by the test"));
  absl::Status s = CollectiveGroup::wait(work);
  std::string out = absl::StrCat(done ? "done" : "pending", " after ", ms, " ms|", s.ToString(),
                                 "|", group_->failed().ToString());
  // NCCL's kernels have stopped (the communicator is aborted): the buffer is free to go.
  (void)cudaDeviceSynchronize();
  (void)cudaFree(*data);
  return out;
}

std::string DeviceReducer::failed() const {
  return group_ ? group_->failed().ToString() : "not in a group";
}

}  // namespace troupe::testing
