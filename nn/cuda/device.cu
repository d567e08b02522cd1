// The CUDA backend's self test (nn/cuda/self_test.h).
#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "nn/cuda/detail/check.h"
#include "nn/cuda/self_test.h"

namespace troupe::nn::cuda {
namespace {

__global__ void iota_scaled(float* out, int n, float scale) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = scale * static_cast<float>(i);
}

}  // namespace

absl::Status self_test(cudaStream_t stream) {
  constexpr int kN = 1 << 16;
  float* device = nullptr;
  if (absl::Status s = detail::cuda_status(cudaMalloc(&device, kN * sizeof(float)), "cudaMalloc");
      !s.ok()) {
    return absl::FailedPreconditionError(s.message());
  }
  iota_scaled<<<(kN + 255) / 256, 256, 0, stream>>>(device, kN, 0.5f);
  std::vector<float> host(kN);
  absl::Status copied = detail::cuda_status(
      cudaMemcpyAsync(host.data(), device, kN * sizeof(float), cudaMemcpyDeviceToHost, stream),
      "kernel or cudaMemcpy");
  if (copied.ok()) copied.Update(detail::cuda_status(cudaStreamSynchronize(stream), "self test"));
  cudaFree(device);
  if (!copied.ok()) return absl::FailedPreconditionError(copied.message());
  for (int i = 0; i < kN; ++i) {
    if (host[i] != 0.5f * static_cast<float>(i)) {
      return absl::InternalError("cuda self test: wrong value at index " + std::to_string(i));
    }
  }
  return absl::OkStatus();
}

}  // namespace troupe::nn::cuda
