// nn/cuda/optim.h. Compiled with -fmad=false (nn/CMakeLists.txt): no multiply-add is fused, as
// on the CPU (-ffp-contract=off).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "nn/cuda/detail/check.h"
#include "nn/cuda/detail/reduce.h"
#include "nn/cuda/optim.h"

namespace troupe::nn::cuda {
namespace {

constexpr int kThreads = 256;

#define TROUPE_GRID_STRIDE(i, n)                                          \
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < (n); \
       i += size_t{gridDim.x} * blockDim.x)

unsigned grid_for(size_t n) {
  const size_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 65535 ? (blocks > 0 ? blocks : 1) : 65535);
}

// The formula of nn/optim/adamw.h, one element, in its order; __fsqrt_rn and __fdiv_rn are the
// IEEE-rounded square root and division, as the CPU's.
__global__ void adamw_kernel(float* params, const float* grads, float* m, float* v, size_t n,
                             AdamWCoefficients k, float decay) {
  TROUPE_GRID_STRIDE(i, n) {
    float p = params[i] * decay;
    const float g = grads[i];
    const float mi = __fadd_rn(__fmul_rn(k.beta1, m[i]), __fmul_rn(k.one_minus_beta1, g));
    const float vi =
        __fadd_rn(__fmul_rn(k.beta2, v[i]), __fmul_rn(__fmul_rn(k.one_minus_beta2, g), g));
    const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), k.bias_correction2_sqrt), k.eps);
    p = __fadd_rn(p, __fdiv_rn(__fmul_rn(k.neg_step_size, mi), denom));
    params[i] = p;
    m[i] = mi;
    v[i] = vi;
  }
}

// nn/optim/sgd.h's formula, one element.
__global__ void sgd_kernel(float* params, const float* grads, float* buffer, size_t n, float wd,
                           float mu, float one_minus_dampening, bool nesterov, bool first,
                           float neg_lr) {
  TROUPE_GRID_STRIDE(i, n) {
    float d = wd != 0 ? __fadd_rn(grads[i], __fmul_rn(wd, params[i])) : grads[i];
    if (buffer != nullptr) {
      const float b =
          first ? d : __fadd_rn(__fmul_rn(mu, buffer[i]), __fmul_rn(one_minus_dampening, d));
      buffer[i] = b;
      d = nesterov ? __fadd_rn(d, __fmul_rn(mu, b)) : b;
    }
    params[i] = __fadd_rn(params[i], __fmul_rn(neg_lr, d));
  }
}

__global__ void round_kernel(float* out, const float* in, size_t n, bool bf16) {
  TROUPE_GRID_STRIDE(i, n) {
    out[i] =
        bf16 ? __bfloat162float(__float2bfloat16_rn(in[i])) : __half2float(__float2half_rn(in[i]));
  }
}

__global__ void add_kernel(float* dst, const float* src, size_t n) {
  TROUPE_GRID_STRIDE(i, n) {
    dst[i] = __fadd_rn(dst[i], src[i]);
  }
}

__global__ void scale_kernel(float* g, size_t n, float coef) {
  TROUPE_GRID_STRIDE(i, n) {
    g[i] = __fmul_rn(g[i], coef);
  }
}

// Pass 1: block b sums the squares of its grid-stride elements; a fixed tree within the block.
__global__ void sum_of_squares_kernel(double* partials, const float* g, size_t n) {
  __shared__ double shared[32];
  double sum = 0;
  TROUPE_GRID_STRIDE(i, n) {
    const double x = g[i];
    sum = __dadd_rn(sum, __dmul_rn(x, x));
  }
  sum = detail::block_reduce(sum, detail::Sum{}, 0.0, shared);
  if (threadIdx.x == 0) partials[blockIdx.x] = sum;
}

// Pass 1: 1.0 in partials[b] if block b saw an exponent of all ones (inf or NaN).
__global__ void inf_or_nan_kernel(double* partials, const float* g, size_t n) {
  __shared__ double shared[32];
  double found = 0;
  TROUPE_GRID_STRIDE(i, n) {
    if ((__float_as_uint(g[i]) & 0x7f800000u) == 0x7f800000u) found = 1;
  }
  found = detail::block_reduce(found, detail::Sum{}, 0.0, shared);
  if (threadIdx.x == 0) partials[blockIdx.x] = found;
}

// Pass 2: one block of kReductionBlocks threads adds the partials in a fixed tree.
__global__ void sum_partials_kernel(double* result, const double* partials) {
  __shared__ double shared[32];
  const double sum = detail::block_reduce(partials[threadIdx.x], detail::Sum{}, 0.0, shared);
  if (threadIdx.x == 0) *result = sum;
}

absl::Status reduce(void (*pass1)(double*, const float*, size_t), const char* what, const float* g,
                    size_t n, ReductionScratch scratch, cudaStream_t stream) {
  pass1<<<kReductionBlocks, kThreads, 0, stream>>>(scratch.partials, g, n);
  sum_partials_kernel<<<1, kReductionBlocks, 0, stream>>>(scratch.result, scratch.partials);
  return detail::launch_status(what);
}

}  // namespace

absl::Status adamw_update(float* params, const float* grads, float* m, float* v, size_t n,
                          const AdamWCoefficients& k, float decay, cudaStream_t stream) {
  if (n == 0) return absl::OkStatus();
  adamw_kernel<<<grid_for(n), kThreads, 0, stream>>>(params, grads, m, v, n, k, decay);
  return detail::launch_status("adamw_update");
}

absl::Status sgd_update(float* params, const float* grads, float* momentum_buffer, size_t n,
                        float weight_decay, float mu, float one_minus_dampening, bool nesterov,
                        bool first, float neg_lr, cudaStream_t stream) {
  if (n == 0) return absl::OkStatus();
  sgd_kernel<<<grid_for(n), kThreads, 0, stream>>>(
      params, grads, mu != 0 ? momentum_buffer : nullptr, n, weight_decay, mu, one_minus_dampening,
      nesterov, first, neg_lr);
  return detail::launch_status("sgd_update");
}

absl::Status round_to(float* out, const float* in, size_t n, bool bf16, cudaStream_t stream) {
  if (n == 0) return absl::OkStatus();
  round_kernel<<<grid_for(n), kThreads, 0, stream>>>(out, in, n, bf16);
  return detail::launch_status("round_to");
}

absl::Status add(float* dst, const float* src, size_t n, cudaStream_t stream) {
  if (n == 0) return absl::OkStatus();
  add_kernel<<<grid_for(n), kThreads, 0, stream>>>(dst, src, n);
  return detail::launch_status("add");
}

absl::Status scale(float* g, size_t n, float coef, cudaStream_t stream) {
  if (n == 0) return absl::OkStatus();
  scale_kernel<<<grid_for(n), kThreads, 0, stream>>>(g, n, coef);
  return detail::launch_status("scale");
}

absl::Status sum_of_squares(const float* g, size_t n, ReductionScratch scratch,
                            cudaStream_t stream) {
  return reduce(sum_of_squares_kernel, "sum_of_squares", g, n, scratch, stream);
}

absl::Status any_inf_or_nan(const float* g, size_t n, ReductionScratch scratch,
                            cudaStream_t stream) {
  return reduce(inf_or_nan_kernel, "any_inf_or_nan", g, n, scratch, stream);
}

}  // namespace troupe::nn::cuda
