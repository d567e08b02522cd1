// nn/cuda/layers.h: the token + position embedding, and the pieces of a vocab-parallel one (a
// rank's rows of the table; the positions added after the group's sum).
#include <cuda_runtime.h>

#include <climits>
#include <cstddef>
#include <cstdint>

#include "nn/cuda/detail/check.h"
#include "nn/cuda/detail/reduce.h"
#include "nn/cuda/layers.h"

namespace troupe::nn::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

// One thread per output element, over BT*C.
__global__ void encoder_forward_kernel(float* out, const int32_t* inp, const float* wte,
                                       const float* wpe, size_t BT, int T, int C) {
  const size_t n = BT * C;
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    const size_t bt = i / C;
    const int c = static_cast<int>(i % C);
    const int t = static_cast<int>(bt % T);
    out[i] = wte[static_cast<size_t>(inp[bt]) * C + c] + wpe[static_cast<size_t>(t) * C + c];
  }
}

// out[bt, :] = table[inp[bt] - v0, :] for tokens in [v0, v1), zeros for the rest.
__global__ void embedding_rows_kernel(float* out, const int32_t* inp, const float* table, int v0,
                                      int v1, size_t BT, int C) {
  const size_t n = BT * C;
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    const int v = inp[i / C];
    const int c = static_cast<int>(i % C);
    out[i] = v >= v0 && v < v1 ? table[static_cast<size_t>(v - v0) * C + c] : 0.0f;
  }
}

// out[r, :] += rows[r % period, :] for r in [0, n).
__global__ void add_rows_kernel(float* out, const float* rows, size_t n, int period, int C) {
  const size_t total = n * C;
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < total;
       i += size_t{gridDim.x} * blockDim.x) {
    const size_t r = i / C;
    const int c = static_cast<int>(i % C);
    out[i] += rows[(r % period) * C + c];
  }
}

// A block per position i (grid BT, kThreads threads). Token v = inp[i]; a token outside the
// table's rows [v0, v1) is another rank's and the block leaves. The block of the first position
// holding v owns dwte row v - v0, every other block leaves at once. The owner collects the
// positions j >= i holding v, kThreads at a time, in order (a ballot per warp, then the warps'
// counts), and its threads, one column each, add dout[j] into the row in that order: the CPU's
// order, with no atomics. Work: O(BT) comparisons a position, O(BT^2) in all.
__global__ void encoder_wte_backward_kernel(float* dwte, const float* dout, const int32_t* inp,
                                            int BT, int C, int v0, int v1) {
  __shared__ int rows[kThreads];
  __shared__ int warp_count[kWarps];
  const int i = blockIdx.x;
  const int v = inp[i];
  if (v < v0 || v >= v1) return;  // the same answer in every thread of the block
  int seen = 0;
  for (int j = threadIdx.x; j < i; j += kThreads)
    seen |= inp[j] == v;
  if (__syncthreads_or(seen)) return;  // the same answer in every thread of the block

  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  float* d = dwte + static_cast<size_t>(v - v0) * C;
  for (int base = i; base < BT; base += kThreads) {
    const int j = base + threadIdx.x;
    const bool match = j < BT && inp[j] == v;
    const unsigned ballot = __ballot_sync(detail::kFullMask, match);
    if (lane == 0) warp_count[warp] = __popc(ballot);
    __syncthreads();
    int offset = 0;
    int total = 0;
    for (int w = 0; w < kWarps; w++) {
      if (w < warp) offset += warp_count[w];
      total += warp_count[w];
    }
    if (match) rows[offset + __popc(ballot & ((1u << lane) - 1u))] = j;
    __syncthreads();
    for (int c = threadIdx.x; c < C; c += kThreads) {
      float acc = d[c];
      for (int k = 0; k < total; k++)
        acc += dout[static_cast<size_t>(rows[k]) * C + c];
      d[c] = acc;
    }
    __syncthreads();  // rows and warp_count are rewritten by the next round
  }
}

// One thread per (t, c): dwpe[t, c] += dout[b, t, c] for b in order.
__global__ void encoder_wpe_backward_kernel(float* dwpe, const float* dout, int B, int T, int C) {
  const size_t n = static_cast<size_t>(T) * C;
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    float acc = dwpe[i];
    for (int b = 0; b < B; b++)
      acc += dout[static_cast<size_t>(b) * n + i];
    dwpe[i] = acc;
  }
}

}  // namespace

absl::Status encoder_forward(float* out, const int32_t* inp, const float* wte, const float* wpe,
                             int B, int T, int C, cudaStream_t stream) {
  const size_t BT = static_cast<size_t>(B) * T;
  if (BT == 0 || C == 0) return absl::OkStatus();
  encoder_forward_kernel<<<detail::grid_for(BT * C, kThreads), kThreads, 0, stream>>>(
      out, inp, wte, wpe, BT, T, C);
  return detail::launch_status("encoder_forward");
}

absl::Status encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* inp,
                              int B, int T, int C, cudaStream_t stream) {
  const int BT = B * T;
  if (BT == 0 || C == 0) return absl::OkStatus();
  encoder_wte_backward_kernel<<<BT, kThreads, 0, stream>>>(dwte, dout, inp, BT, C, 0, INT_MAX);
  const size_t n = static_cast<size_t>(T) * C;
  encoder_wpe_backward_kernel<<<detail::grid_for(n, kThreads), kThreads, 0, stream>>>(dwpe, dout, B,
                                                                                      T, C);
  return detail::launch_status("encoder_backward");
}

absl::Status embedding_rows_forward(float* out, const int32_t* inp, const float* table, int v0,
                                    int v1, int B, int T, int C, cudaStream_t stream) {
  const size_t BT = static_cast<size_t>(B) * T;
  if (BT == 0 || C == 0) return absl::OkStatus();
  embedding_rows_kernel<<<detail::grid_for(BT * C, kThreads), kThreads, 0, stream>>>(
      out, inp, table, v0, v1, BT, C);
  return detail::launch_status("embedding_rows_forward");
}

absl::Status embedding_rows_backward(float* dtable, const float* dout, const int32_t* inp, int v0,
                                     int v1, int B, int T, int C, cudaStream_t stream) {
  const int BT = B * T;
  if (BT == 0 || C == 0 || v0 >= v1) return absl::OkStatus();
  encoder_wte_backward_kernel<<<BT, kThreads, 0, stream>>>(dtable, dout, inp, BT, C, v0, v1);
  return detail::launch_status("embedding_rows_backward");
}

absl::Status add_rows(float* out, const float* rows, size_t n, int period, int C,
                      cudaStream_t stream) {
  if (n == 0 || C == 0) return absl::OkStatus();
  add_rows_kernel<<<detail::grid_for(n * C, kThreads), kThreads, 0, stream>>>(out, rows, n, period,
                                                                              C);
  return detail::launch_status("add_rows");
}

absl::Status position_backward(float* dwpe, const float* dout, int B, int T, int C,
                               cudaStream_t stream) {
  const size_t n = static_cast<size_t>(T) * C;
  if (B == 0 || n == 0) return absl::OkStatus();
  encoder_wpe_backward_kernel<<<detail::grid_for(n, kThreads), kThreads, 0, stream>>>(dwpe, dout, B,
                                                                                      T, C);
  return detail::launch_status("position_backward");
}

}  // namespace troupe::nn::cuda
