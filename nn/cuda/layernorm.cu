// nn/cuda/layers.h: layer normalisation. A warp per position for the row statistics and dinp;
// dweight and dbias by 32 x 32 blocks that each own 32 channels (detail::column_sum).
#include <cuda_runtime.h>

#include <cstddef>

#include "nn/cuda/detail/check.h"
#include "nn/cuda/detail/reduce.h"
#include "nn/cuda/layers.h"
#include "nn/layers/layernorm.h"

namespace troupe::nn::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kRowsPerBlock = kThreads / 32;

// As the CPU: the mean, then the variance of the centred values (two passes), rstd =
// 1 / sqrt(var + eps).
__global__ void layernorm_forward_kernel(float* out, float* mean, float* rstd, const float* inp,
                                         const float* weight, const float* bias, int BT, int C) {
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= BT) return;  // the whole warp
  const float* x = inp + static_cast<size_t>(row) * C;
  float* y = out + static_cast<size_t>(row) * C;
  float sum = 0.0f;
  for (int i = lane; i < C; i += 32)
    sum += x[i];
  const float m = detail::warp_reduce(sum, detail::Sum{}) / C;
  float sq = 0.0f;
  for (int i = lane; i < C; i += 32) {
    const float d = x[i] - m;
    sq += d * d;
  }
  const float s = 1.0f / sqrtf(detail::warp_reduce(sq, detail::Sum{}) / C + kLayerNormEps);
  for (int i = lane; i < C; i += 32)
    y[i] = (x[i] - m) * s * weight[i] + bias[i];
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = s;
  }
}

// dinp += (dnorm - mean(dnorm) - norm * mean(dnorm * norm)) * rstd, dnorm = weight * dout.
__global__ void layernorm_dinp_kernel(float* dinp, const float* dout, const float* inp,
                                      const float* weight, const float* mean, const float* rstd,
                                      int BT, int C) {
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= BT) return;
  const size_t off = static_cast<size_t>(row) * C;
  const float* g = dout + off;
  const float* x = inp + off;
  float* dx = dinp + off;
  const float m = mean[row];
  const float s = rstd[row];
  float dnorm_mean = 0.0f;
  float dnorm_norm_mean = 0.0f;
  for (int i = lane; i < C; i += 32) {
    const float norm = (x[i] - m) * s;
    const float dnorm = weight[i] * g[i];
    dnorm_mean += dnorm;
    dnorm_norm_mean += dnorm * norm;
  }
  dnorm_mean = detail::warp_reduce(dnorm_mean, detail::Sum{}) / C;
  dnorm_norm_mean = detail::warp_reduce(dnorm_norm_mean, detail::Sum{}) / C;
  for (int i = lane; i < C; i += 32) {
    const float norm = (x[i] - m) * s;
    const float dnorm = weight[i] * g[i];
    dx[i] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
  }
}

// Block (32, 32) per 32 channels: dweight[c] += sum of norm * dout, dbias[c] += sum of dout.
__global__ void layernorm_dparams_kernel(float* dweight, float* dbias, const float* dout,
                                         const float* inp, const float* mean, const float* rstd,
                                         int BT, int C) {
  __shared__ float shared_w[32][33];
  __shared__ float shared_b[32][33];
  const int c = blockIdx.x * 32 + threadIdx.x;
  float pw = 0.0f;
  float pb = 0.0f;
  if (c < C) {
    for (int row = threadIdx.y; row < BT; row += 32) {
      const size_t i = static_cast<size_t>(row) * C + c;
      const float g = dout[i];
      pw += (inp[i] - mean[row]) * rstd[row] * g;
      pb += g;
    }
  }
  const float w = detail::column_sum(pw, shared_w);
  const float b = detail::column_sum(pb, shared_b);
  if (threadIdx.y == 0 && c < C) {
    dweight[c] += w;
    dbias[c] += b;
  }
}

}  // namespace

absl::Status layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                               const float* weight, const float* bias, int B, int T, int C,
                               cudaStream_t stream) {
  const int BT = B * T;
  if (BT == 0) return absl::OkStatus();
  const int blocks = (BT + kRowsPerBlock - 1) / kRowsPerBlock;
  layernorm_forward_kernel<<<blocks, kThreads, 0, stream>>>(out, mean, rstd, inp, weight, bias, BT,
                                                            C);
  return detail::launch_status("layernorm_forward");
}

absl::Status layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                                const float* inp, const float* weight, const float* mean,
                                const float* rstd, int B, int T, int C, cudaStream_t stream) {
  const int BT = B * T;
  if (BT == 0 || C == 0) return absl::OkStatus();
  const int blocks = (BT + kRowsPerBlock - 1) / kRowsPerBlock;
  layernorm_dinp_kernel<<<blocks, kThreads, 0, stream>>>(dinp, dout, inp, weight, mean, rstd, BT,
                                                         C);
  layernorm_dparams_kernel<<<(C + 31) / 32, dim3(32, 32), 0, stream>>>(dweight, dbias, dout, inp,
                                                                       mean, rstd, BT, C);
  return detail::launch_status("layernorm_backward");
}

}  // namespace troupe::nn::cuda
