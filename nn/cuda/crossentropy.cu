// nn/cuda/layers.h: softmax and cross-entropy, fused, and the pieces of a vocab-parallel
// cross-entropy (a rank's columns; the group's all-reduces between them are the caller's). A
// block per position reduces its row of logits (max, then sum of exponentials), each in a fixed
// order (detail::block_reduce).
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

// Over a row's columns [0, n) of `stride` (a rank's real columns, whose first is vocabulary entry
// v0): dlogits += scale * exp(logits - lse), then -= scale at the target, in that order (the
// CPU's).
__global__ void crossentropy_backward_kernel(float* dlogits, float scale, const float* logits,
                                             const float* lse, const int32_t* targets, int n,
                                             int stride, int v0) {
  const size_t row = blockIdx.x;
  const size_t off = row * stride;
  const float l = lse[row];
  const int target = targets[row] - v0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
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

// maxes[row] = the largest of the row's columns [0, n) (-inf when n is 0: a rank of padding).
__global__ void row_max_kernel(float* maxes, const float* logits, int n, int stride) {
  __shared__ float shared[32];
  const float* x = logits + static_cast<size_t>(blockIdx.x) * stride;
  float m = -INFINITY;
  for (int i = threadIdx.x; i < n; i += blockDim.x)
    m = fmaxf(m, x[i]);
  m = detail::block_reduce(m, detail::Max{}, -INFINITY, shared);
  if (threadIdx.x == 0) maxes[blockIdx.x] = m;
}

// sums[row] = sum of exp(x - maxes[row]) over the columns [0, n); sums[BT + row] = the target's
// logit when this rank holds it (column targets[row] - v0 in [0, n)), else 0.
__global__ void row_sums_kernel(float* sums, const float* logits, const float* maxes,
                                const int32_t* targets, int n, int stride, int v0, int BT) {
  __shared__ float shared[32];
  const size_t row = blockIdx.x;
  const float* x = logits + row * stride;
  const float m = maxes[row];
  float s = 0.0f;
  for (int i = threadIdx.x; i < n; i += blockDim.x)
    s += expf(x[i] - m);
  s = detail::block_reduce(s, detail::Sum{}, 0.0f, shared);
  if (threadIdx.x == 0) {
    const int local = targets[row] - v0;
    sums[row] = s;
    sums[BT + row] = local >= 0 && local < n ? x[local] : 0.0f;
  }
}

// One block: lse = maxes + log(sums), losses = lse - target logit, loss = their mean, summed in
// double by thread then by block_reduce. lse may alias maxes.
__global__ void parallel_loss_kernel(float* loss, float* losses, float* lse, const float* maxes,
                                     const float* sums, int BT) {
  __shared__ double shared[32];
  double sum = 0.0;
  for (int row = threadIdx.x; row < BT; row += blockDim.x) {
    const float l = maxes[row] + logf(sums[row]);
    lse[row] = l;
    const float one = l - sums[BT + row];
    if (losses != nullptr) losses[row] = one;
    sum += one;
  }
  sum = detail::block_reduce(sum, detail::Sum{}, 0.0, shared);
  if (threadIdx.x == 0) *loss = static_cast<float>(sum / BT);
}

// A rank's columns [v0, v0 + Vl) that are real vocabulary (< V); the rest is padding.
int real_columns(int v0, int Vl, int V) {
  return V - v0 < 0 ? 0 : (V - v0 < Vl ? V - v0 : Vl);
}

}  // namespace

absl::Status vocab_parallel_max(float* maxes, const float* logits_shard, int v0, int Vl, int V,
                                int B, int T, cudaStream_t stream) {
  const int BT = B * T;
  if (BT == 0) return absl::OkStatus();
  row_max_kernel<<<BT, kThreads, 0, stream>>>(maxes, logits_shard, real_columns(v0, Vl, V), Vl);
  return detail::launch_status("vocab_parallel_max");
}

absl::Status vocab_parallel_sums(float* sums, const float* logits_shard, const float* maxes,
                                 const int32_t* targets, int v0, int Vl, int V, int B, int T,
                                 cudaStream_t stream) {
  const int BT = B * T;
  if (BT == 0) return absl::OkStatus();
  row_sums_kernel<<<BT, kThreads, 0, stream>>>(sums, logits_shard, maxes, targets,
                                               real_columns(v0, Vl, V), Vl, v0, BT);
  return detail::launch_status("vocab_parallel_sums");
}

absl::Status vocab_parallel_loss(float* loss, float* losses, float* lse, const float* maxes,
                                 const float* sums, int B, int T, cudaStream_t stream) {
  const int BT = B * T;
  if (BT == 0) return absl::OkStatus();
  parallel_loss_kernel<<<1, kMeanThreads, 0, stream>>>(loss, losses, lse, maxes, sums, BT);
  return detail::launch_status("vocab_parallel_loss");
}

absl::Status vocab_parallel_crossentropy_backward(float* dlogits_shard, float dloss,
                                                  const float* logits_shard, const float* lse,
                                                  const int32_t* targets, int v0, int Vl, int V,
                                                  int B, int T, cudaStream_t stream) {
  const int BT = B * T;
  if (BT == 0) return absl::OkStatus();
  const float scale = dloss / static_cast<float>(BT);
  crossentropy_backward_kernel<<<BT, kThreads, 0, stream>>>(
      dlogits_shard, scale, logits_shard, lse, targets, real_columns(v0, Vl, V), Vl, v0);
  return detail::launch_status("vocab_parallel_crossentropy_backward");
}

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
                                                            Vp, 0);
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
