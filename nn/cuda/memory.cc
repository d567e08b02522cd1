// CUDA side of nn/memory.h: device memory through the CUDA runtime, on the
// calling thread's current device. Compiled only in builds with CUDA; no CPU
// path calls it.
#include <cuda_runtime.h>

#include "absl/strings/str_cat.h"
#include "nn/memory.h"

namespace troupe::nn::detail {
namespace {

absl::Status cuda_error(const char* what, int64_t bytes, cudaError_t err) {
  return absl::InternalError(absl::StrCat(what, " of ", bytes,
                                          " bytes failed: ", cudaGetErrorName(err), " (",
                                          cudaGetErrorString(err), ")"));
}

}  // namespace

absl::StatusOr<void*> cuda_allocate(int64_t bytes) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot allocate ", bytes, " bytes on cuda: no usable CUDA device"));
  }
  void* data = nullptr;
  if (cudaError_t err = cudaMalloc(&data, static_cast<size_t>(bytes)); err != cudaSuccess) {
    if (err == cudaErrorMemoryAllocation) {
      return absl::ResourceExhaustedError(
          absl::StrCat("cannot allocate ", bytes, " bytes on cuda: out of device memory"));
    }
    return cuda_error("cudaMalloc", bytes, err);
  }
  return data;
}

void cuda_free(void* data) {
  cudaFree(data);
}

absl::Status cuda_copy(void* dst, Device dst_device, const void* src, Device src_device,
                       int64_t bytes) {
  cudaMemcpyKind kind = cudaMemcpyDeviceToDevice;
  if (src_device == Device::kCpu) kind = cudaMemcpyHostToDevice;
  if (dst_device == Device::kCpu) kind = cudaMemcpyDeviceToHost;
  if (cudaError_t err = cudaMemcpy(dst, src, static_cast<size_t>(bytes), kind);
      err != cudaSuccess) {
    return cuda_error("cudaMemcpy", bytes, err);
  }
  return absl::OkStatus();
}

absl::Status cuda_zero(void* data, int64_t bytes) {
  if (cudaError_t err = cudaMemset(data, 0, static_cast<size_t>(bytes)); err != cudaSuccess) {
    return cuda_error("cudaMemset", bytes, err);
  }
  return absl::OkStatus();
}

}  // namespace troupe::nn::detail
