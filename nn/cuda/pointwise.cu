// nn/cuda/layers.h: the elementwise layers, GELU and the residual connection.
#include <cuda_runtime.h>

#include <cstddef>

#include "nn/cuda/detail/check.h"
#include "nn/cuda/detail/reduce.h"
#include "nn/cuda/layers.h"

namespace troupe::nn::cuda {
namespace {

constexpr int kThreads = 256;
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;

#define TROUPE_GRID_STRIDE(i, n)                                          \
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < (n); \
       i += size_t{gridDim.x} * blockDim.x)

// As the CPU: 0.5 (1 + tanh(u)) == 1 / (1 + exp(-2u)).
__device__ float sigmoid_2u(float x) {
  const float u = kSqrt2OverPi * (x + kCubic * x * x * x);
  return 1.0f / (1.0f + expf(-2.0f * u));
}

__global__ void gelu_forward_kernel(float* out, const float* inp, size_t N) {
  TROUPE_GRID_STRIDE(i, N) {
    const float x = inp[i];
    out[i] = x * sigmoid_2u(x);
  }
}

__global__ void gelu_backward_kernel(float* dinp, const float* dout, const float* inp, size_t N) {
  TROUPE_GRID_STRIDE(i, N) {
    const float x = inp[i];
    const float s = sigmoid_2u(x);
    const float du = kSqrt2OverPi * (1.0f + 3.0f * kCubic * x * x);
    dinp[i] += (s + 2.0f * x * s * (1.0f - s) * du) * dout[i];
  }
}

__global__ void residual_forward_kernel(float* out, const float* inp1, const float* inp2,
                                        size_t N) {
  TROUPE_GRID_STRIDE(i, N) {
    out[i] = inp1[i] + inp2[i];
  }
}

__global__ void accumulate_kernel(float* d, const float* dout, size_t N) {
  TROUPE_GRID_STRIDE(i, N) {
    d[i] += dout[i];
  }
}

#undef TROUPE_GRID_STRIDE

}  // namespace

absl::Status gelu_forward(float* out, const float* inp, size_t N, cudaStream_t stream) {
  if (N == 0) return absl::OkStatus();
  gelu_forward_kernel<<<detail::grid_for(N, kThreads), kThreads, 0, stream>>>(out, inp, N);
  return detail::launch_status("gelu_forward");
}

absl::Status gelu_backward(float* dinp, const float* dout, const float* inp, size_t N,
                           cudaStream_t stream) {
  if (N == 0) return absl::OkStatus();
  gelu_backward_kernel<<<detail::grid_for(N, kThreads), kThreads, 0, stream>>>(dinp, dout, inp, N);
  return detail::launch_status("gelu_backward");
}

absl::Status residual_forward(float* out, const float* inp1, const float* inp2, size_t N,
                              cudaStream_t stream) {
  if (N == 0) return absl::OkStatus();
  residual_forward_kernel<<<detail::grid_for(N, kThreads), kThreads, 0, stream>>>(out, inp1, inp2,
                                                                                  N);
  return detail::launch_status("residual_forward");
}

absl::Status residual_backward(float* dinp1, float* dinp2, const float* dout, size_t N,
                               cudaStream_t stream) {
  if (N == 0) return absl::OkStatus();
  for (float* d : {dinp1, dinp2}) {
    if (d == nullptr) continue;
    accumulate_kernel<<<detail::grid_for(N, kThreads), kThreads, 0, stream>>>(d, dout, N);
  }
  return detail::launch_status("residual_backward");
}

}  // namespace troupe::nn::cuda
