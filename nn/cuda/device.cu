// CUDA side of nn/device.h.
#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "nn/device.h"

namespace troupe::nn {
namespace {

__global__ void iota_scaled(float* out, int n, float scale) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = scale * static_cast<float>(i);
}

absl::Status cuda_error(const char* what, cudaError_t err) {
  return absl::FailedPreconditionError(std::string(what) + ": " + cudaGetErrorString(err));
}

}  // namespace

bool cuda_compiled() {
  return true;
}

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

absl::Status cuda_self_test() {
  int n_devices = 0;
  if (cudaError_t err = cudaGetDeviceCount(&n_devices); err != cudaSuccess) {
    return cuda_error("cudaGetDeviceCount", err);
  }
  if (n_devices == 0) return absl::FailedPreconditionError("no CUDA device");
  constexpr int kN = 1 << 16;
  float* device = nullptr;
  if (cudaError_t err = cudaMalloc(&device, kN * sizeof(float)); err != cudaSuccess) {
    return cuda_error("cudaMalloc", err);
  }
  iota_scaled<<<(kN + 255) / 256, 256>>>(device, kN, 0.5f);
  std::vector<float> host(kN);
  cudaError_t err = cudaMemcpy(host.data(), device, kN * sizeof(float), cudaMemcpyDeviceToHost);
  cudaFree(device);
  if (err != cudaSuccess) return cuda_error("kernel or cudaMemcpy", err);
  for (int i = 0; i < kN; ++i) {
    if (host[i] != 0.5f * static_cast<float>(i)) {
      return absl::InternalError("cuda_self_test: wrong value at index " + std::to_string(i));
    }
  }
  return absl::OkStatus();
}

}  // namespace troupe::nn
