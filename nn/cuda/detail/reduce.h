// Deterministic reductions for the nn/cuda kernels (device code: include from .cu files only).
// Each reduces in an order fixed by the launch shape alone, never by timing: no atomics.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace troupe::nn::cuda::detail {

inline constexpr unsigned kFullMask = 0xffffffffu;

struct Sum {
  template <typename T>
  __device__ T operator()(T a, T b) const {
    return a + b;
  }
};
struct Max {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// The reduction of v over the 32 lanes of a warp, by butterfly: every lane gets the same bits
// (each step combines the same two values, in either order, and + and max commute).
template <typename T, typename Op>
__device__ T warp_reduce(T v, Op op) {
  for (int offset = 16; offset > 0; offset >>= 1)
    v = op(v, __shfl_xor_sync(kFullMask, v, offset));
  return v;
}

// The reduction of v over a 1-D block (blockDim.x a multiple of 32, at most 1024): each warp
// reduces, then every warp reduces the warps' results. Every thread gets the same bits.
// shared: 32 T of shared memory; the call begins with a barrier, so it may be reused back to back.
template <typename T, typename Op>
__device__ T block_reduce(T v, Op op, T identity, T* shared) {
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  v = warp_reduce(v, op);
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < static_cast<int>(blockDim.x / 32) ? shared[lane] : identity;
  return warp_reduce(v, op);
}

// Column sums over a block of 32 x 32 threads that owns 32 columns: thread (x, y) passes its
// partial sum of column x over rows y, y + 32, y + 64, ...; the 32 partials of each column are
// added in a fixed tree. Returns the column's sum to every thread of column x.
// shared: a [32][33] array (padded against bank conflicts), one per concurrent use.
__device__ inline float column_sum(float partial, float (*shared)[33]) {
  shared[threadIdx.y][threadIdx.x] = partial;
  __syncthreads();
  for (int stride = 16; stride > 0; stride >>= 1) {
    if (static_cast<int>(threadIdx.y) < stride)
      shared[threadIdx.y][threadIdx.x] += shared[threadIdx.y + stride][threadIdx.x];
    __syncthreads();
  }
  return shared[0][threadIdx.x];
}

// Blocks for a grid-stride loop over n elements with `threads` threads a block: enough to fill
// any current GPU, never more than n needs.
inline unsigned grid_for(size_t n, unsigned threads) {
  const size_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 8192 ? blocks : 8192);
}

}  // namespace troupe::nn::cuda::detail
