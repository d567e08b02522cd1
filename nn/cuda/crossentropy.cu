// nn/cuda/layers.h: softmax and cross-entropy, fused. A block per position reduces its row of
// logits (max, then sum of exponentials), each in a fixed order (detail::block_reduce).
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "nn/cuda/detail/check.h"
#include "nn/cuda/detail/reduce.h"
#include "nn/cuda/layers.h"

namespace troupe::nn::cuda {
namespace {

constexpr int kThreads = 512;
constexpr int kMeanThreads = 1024;

// The largest of x[0, V) and the sum of exp(x - max), in every thread of the block.
struct RowStats {
  float max;
  float sum;
};
__device__ RowStats row_stats(const float* x, int V, float* shared) {
  float m = -INFINITY;
  for (int i = threadIdx.x; i < V; i += blockDim.x)
    m = fmaxf(m, x[i]);
  m = detail::block_reduce(m, detail::Max{}, -INFINITY, shared);
  float s = 0.0f;
  for (int i = threadIdx.x; i < V; i += blockDim.x)
    s += expf(x[i] - m);
  s = detail::block_reduce(s, detail::Sum{}, 0.0f, shared);
  return {m, s};
}

__global__ void crossentropy_forward_kernel(float* losses, float* lse, const float* logits,
                                            const int32_t* targets, int V, int Vp) {
  __shared__ float shared[32];
  const size_t row = blockIdx.x;
  const float* x = logits + row * Vp;
  const RowStats st = row_stats(x, V, shared);
  if (threadIdx.x == 0) {
    const float l = st.max + logf(st.sum);
    lse[row] = l;
    if (losses != nullptr) losses[row] = l - x[targets[row]];
  }
}

// One block: loss = mean over rows of (lse - logits[target]), each loss rounded to float as the
// CPU stores it, summed in double by thread then by block_reduce.
__global__ void mean_loss_kernel(float* loss, const float* lse, const float* logits,
                                 const int32_t* targets, int BT, int Vp) {
  __shared__ double shared[32];
  double sum = 0.0;
  for (int row = threadIdx.x; row < BT; row += blockDim.x) {
    const float l = lse[row] - logits[static_cast<size_t>(row) * Vp + targets[row]];
    sum += l;
  }
  sum = detail::block_reduce(sum, detail::Sum{}, 0.0, shared);
  if (threadIdx.x == 0) *loss = static_cast<float>(sum / BT);
}

// dlogits += scale * exp(logits - lse), then -= scale at the target, in that order (the CPU's).
__global__ void crossentropy_backward_kernel(float* dlogits, float scale, const float* logits,
                                             const float* lse, const int32_t* targets, int V,
                                             int Vp) {
  const size_t row = blockIdx.x;
  const size_t off = row * Vp;
  const float l = lse[row];
  const int target = targets[row];
  for (int i = threadIdx.x; i < V; i += blockDim.x) {
    float d = dlogits[off + i] + scale * expf(logits[off + i] - l);
    if (i == target) d -= scale;
    dlogits[off + i] = d;
  }
}

__global__ void softmax_forward_kernel(float* probs, const float* logits, int V, int Vp) {
  __shared__ float shared[32];
  const size_t off = static_cast<size_t>(blockIdx.x) * Vp;
  const RowStats st = row_stats(logits + off, V, shared);
  const float inv = 1.0f / st.sum;
  for (int i = threadIdx.x; i < Vp; i += blockDim.x)
    probs[off + i] = i < V ? expf(logits[off + i] - st.max) * inv : 0.0f;
}

}  // namespace

absl::Status crossentropy_forward(float* loss, float* losses, float* lse, const float* logits,
                                  const int32_t* targets, int B, int T, int V, int Vp,
                                  cudaStream_t stream) {
  const int BT = B * T;
  if (BT == 0) return absl::OkStatus();
  crossentropy_forward_kernel<<<BT, kThreads, 0, stream>>>(losses, lse, logits, targets, V, Vp);
  mean_loss_kernel<<<1, kMeanThreads, 0, stream>>>(loss, lse, logits, targets, BT, Vp);
  return detail::launch_status("crossentropy_forward");
}

absl::Status crossentropy_backward(float* dlogits, float dloss, const float* logits,
                                   const float* lse, const int32_t* targets, int B, int T, int V,
                                   int Vp, cudaStream_t stream) {
  const int BT = B * T;
  if (BT == 0) return absl::OkStatus();
  const float scale = dloss / static_cast<float>(BT);
  crossentropy_backward_kernel<<<BT, kThreads, 0, stream>>>(dlogits, scale, logits, lse, targets, V,
                                                            Vp);
  return detail::launch_status("crossentropy_backward");
}

absl::Status softmax_forward(float* probs, const float* logits, int B, int T, int V, int Vp,
                             cudaStream_t stream) {
  const int BT = B * T;
  if (BT == 0) return absl::OkStatus();
  softmax_forward_kernel<<<BT, kThreads, 0, stream>>>(probs, logits, V, Vp);
  return detail::launch_status("softmax_forward");
}

}  // namespace troupe::nn::cuda
