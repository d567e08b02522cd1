// nn/cuda/layers.h: Llama's layers on the device - RMSNorm, the rotary embedding with grouped-
// query attention's packing, and the SwiGLU gate - with nn/layers/rmsnorm.h's, rope.h's and
// swiglu.h's semantics. Reductions in a fixed order (warp butterflies, a channel's positions in
// order): the same bits run after run.
#include <cuda_runtime.h>

#include <cstddef>

#include "nn/cuda/detail/check.h"
#include "nn/cuda/detail/reduce.h"
#include "nn/cuda/layers.h"

namespace troupe::nn::cuda {
namespace {

constexpr int kThreads = 256;

unsigned blocks_for(size_t n) {
  const size_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 65535 ? (b > 0 ? b : 1) : 65535);
}

#define TROUPE_GRID_STRIDE(i, n)                                          \
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < (n); \
       i += size_t{gridDim.x} * blockDim.x)

// A warp per position: out = weight * (x * rstd), rstd = 1 / sqrt(mean(x^2) + eps).
__global__ void rmsnorm_forward_kernel(float* out, float* rstd, const float* inp,
                                       const float* weight, int N, int C, float eps) {
  const int row = static_cast<int>((blockIdx.x * blockDim.x + threadIdx.x) / 32);
  const int lane = threadIdx.x % 32;
  if (row >= N) return;
  const float* x = inp + static_cast<size_t>(row) * C;
  float sq = 0.0f;
  for (int c = lane; c < C; c += 32)
    sq += x[c] * x[c];
  sq = detail::warp_reduce(sq, detail::Sum{});
  const float s = 1.0f / sqrtf(sq / C + eps);
  if (lane == 0) rstd[row] = s;
  float* y = out + static_cast<size_t>(row) * C;
  for (int c = lane; c < C; c += 32)
    y[c] = weight[c] * (x[c] * s);
}

// A warp per position: dinp += rstd * (dnorm - norm * mean(dnorm * norm)).
__global__ void rmsnorm_backward_dinp_kernel(float* dinp, const float* dout, const float* inp,
                                             const float* weight, const float* rstd, int N, int C) {
  const int row = static_cast<int>((blockIdx.x * blockDim.x + threadIdx.x) / 32);
  const int lane = threadIdx.x % 32;
  if (row >= N) return;
  const size_t off = static_cast<size_t>(row) * C;
  const float s = rstd[row];
  float mean = 0.0f;
  for (int c = lane; c < C; c += 32)
    mean += weight[c] * dout[off + c] * (inp[off + c] * s);
  mean = detail::warp_reduce(mean, detail::Sum{}) / C;
  for (int c = lane; c < C; c += 32) {
    const float norm = inp[off + c] * s;
    dinp[off + c] += (weight[c] * dout[off + c] - norm * mean) * s;
  }
}

// A thread per channel: dweight[c] += sum over positions, in order, of norm * dout.
__global__ void rmsnorm_backward_dweight_kernel(float* dweight, const float* dout, const float* inp,
                                                const float* rstd, int N, int C) {
  const int c = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (c >= C) return;
  float sum = 0.0f;
  for (int row = 0; row < N; ++row) {
    const size_t at = static_cast<size_t>(row) * C + c;
    sum += (inp[at] * rstd[row]) * dout[at];
  }
  dweight[c] += sum;
}

// A thread per (position, packed head, pair i < hd/2): out [BT, 3, NH, hd] from qkv [BT,
// (NH + 2 KV) hd]; q and k rotated, v copied; query head h reads KV head h / (NH / KV).
__global__ void rope_forward_kernel(float* out, const float* qkv, const float* cos,
                                    const float* sin, int N, int T, int NH, int KV, int hd) {
  const int half = hd / 2, group = NH / KV;
  const size_t total = static_cast<size_t>(N) * 3 * NH * half;
  TROUPE_GRID_STRIDE(idx, total) {
    const int i = static_cast<int>(idx % half);
    const int h = static_cast<int>((idx / half) % NH);
    const int part = static_cast<int>((idx / (static_cast<size_t>(half) * NH)) % 3);
    const size_t row = idx / (static_cast<size_t>(half) * NH * 3);
    const int t = static_cast<int>(row % T);
    const int src_head = part == 0 ? h : (part == 1 ? NH + h / group : NH + KV + h / group);
    const float* x = qkv + row * (NH + 2 * KV) * hd + static_cast<size_t>(src_head) * hd;
    float* y = out + row * 3 * NH * hd + (static_cast<size_t>(part) * NH + h) * hd;
    const float x1 = x[i], x2 = x[i + half];
    if (part == 2) {
      y[i] = x1;
      y[i + half] = x2;
    } else {
      const float c = cos[t * half + i], s = sin[t * half + i];
      y[i] = x1 * c + (-x2) * s;
      y[i + half] = x2 * c + x1 * s;
    }
  }
}

// A thread per (position, projection head, pair): dqkv written; a KV head's gradient the sum
// over its group's query heads in head order, rotated back for q and k.
__global__ void rope_backward_kernel(float* dqkv, const float* dout, const float* cos,
                                     const float* sin, int N, int T, int NH, int KV, int hd) {
  const int half = hd / 2, group = NH / KV, heads = NH + 2 * KV;
  const size_t total = static_cast<size_t>(N) * heads * half;
  TROUPE_GRID_STRIDE(idx, total) {
    const int i = static_cast<int>(idx % half);
    const int head = static_cast<int>((idx / half) % heads);
    const size_t row = idx / (static_cast<size_t>(half) * heads);
    const int t = static_cast<int>(row % T);
    const float c = cos[t * half + i], s = sin[t * half + i];
    const float* d = dout + row * 3 * NH * hd;
    int part, first, count;
    if (head < NH) {
      part = 0, first = head, count = 1;
    } else if (head < NH + KV) {
      part = 1, first = (head - NH) * group, count = group;
    } else {
      part = 2, first = (head - NH - KV) * group, count = group;
    }
    float g1 = 0.0f, g2 = 0.0f;
    for (int h = first; h < first + count; ++h) {
      const float* dy = d + (static_cast<size_t>(part) * NH + h) * hd;
      const float d1 = dy[i], d2 = dy[i + half];
      if (part == 2) {
        g1 += d1;
        g2 += d2;
      } else {  // the rotation's transpose
        g1 += d1 * c + d2 * s;
        g2 += d2 * c + (-d1) * s;
      }
    }
    float* dx = dqkv + row * heads * hd + static_cast<size_t>(head) * hd;
    dx[i] = g1;
    dx[i + half] = g2;
  }
}

__global__ void swiglu_forward_kernel(float* out, const float* gu, size_t N, int I) {
  TROUPE_GRID_STRIDE(idx, N * I) {
    const size_t row = idx / I, i = idx % I;
    const float g = gu[row * 2 * I + i], u = gu[row * 2 * I + I + i];
    out[idx] = g / (1.0f + expf(-g)) * u;
  }
}

__global__ void swiglu_backward_kernel(float* dgu, const float* dout, const float* gu, size_t N,
                                       int I) {
  TROUPE_GRID_STRIDE(idx, N * I) {
    const size_t row = idx / I, i = idx % I;
    const float g = gu[row * 2 * I + i], u = gu[row * 2 * I + I + i];
    const float s = 1.0f / (1.0f + expf(-g));
    dgu[row * 2 * I + i] = dout[idx] * u * (s * (1.0f + g * (1.0f - s)));
    dgu[row * 2 * I + I + i] = dout[idx] * (g * s);
  }
}

}  // namespace

absl::Status rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int B,
                             int T, int C, float eps, cudaStream_t stream) {
  const int N = B * T;
  rmsnorm_forward_kernel<<<blocks_for(static_cast<size_t>(N) * 32), kThreads, 0, stream>>>(
      out, rstd, inp, weight, N, C, eps);
  return detail::launch_status("rmsnorm_forward");
}

absl::Status rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                              const float* weight, const float* rstd, int B, int T, int C,
                              cudaStream_t stream) {
  const int N = B * T;
  rmsnorm_backward_dinp_kernel<<<blocks_for(static_cast<size_t>(N) * 32), kThreads, 0, stream>>>(
      dinp, dout, inp, weight, rstd, N, C);
  rmsnorm_backward_dweight_kernel<<<blocks_for(static_cast<size_t>(C)), kThreads, 0, stream>>>(
      dweight, dout, inp, rstd, N, C);
  return detail::launch_status("rmsnorm_backward");
}

absl::Status rope_qkv_forward(float* out, const float* qkv, const float* cos, const float* sin,
                              int B, int T, int NH, int KV, int hd, cudaStream_t stream) {
  const size_t n = static_cast<size_t>(B) * T * 3 * NH * (hd / 2);
  rope_forward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(out, qkv, cos, sin, B * T, T, NH, KV,
                                                              hd);
  return detail::launch_status("rope_qkv_forward");
}

absl::Status rope_qkv_backward(float* dqkv, const float* dout, const float* cos, const float* sin,
                               int B, int T, int NH, int KV, int hd, cudaStream_t stream) {
  const size_t n = static_cast<size_t>(B) * T * (NH + 2 * KV) * (hd / 2);
  rope_backward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(dqkv, dout, cos, sin, B * T, T, NH,
                                                               KV, hd);
  return detail::launch_status("rope_qkv_backward");
}

absl::Status swiglu_forward(float* out, const float* gu, int B, int T, int I, cudaStream_t stream) {
  const size_t N = static_cast<size_t>(B) * T;
  swiglu_forward_kernel<<<blocks_for(N * I), kThreads, 0, stream>>>(out, gu, N, I);
  return detail::launch_status("swiglu_forward");
}

absl::Status swiglu_backward(float* dgu, const float* dout, const float* gu, int B, int T, int I,
                             cudaStream_t stream) {
  const size_t N = static_cast<size_t>(B) * T;
  swiglu_backward_kernel<<<blocks_for(N * I), kThreads, 0, stream>>>(dgu, dout, gu, N, I);
  return detail::launch_status("swiglu_backward");
}

}  // namespace troupe::nn::cuda
