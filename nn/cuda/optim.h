// The optimizer's kernels on a CUDA device: nn/optim's updates and reductions on device
// pointers, enqueued on `stream` (the CUDA backend's, device_backend.h). Compiled only in builds
// with CUDA, into libtroupe_nn_cuda; no CPU path includes this header.
//
// The updates are nn/optim's arithmetic in the same order, compiled without fused multiply-adds
// (-fmad=false) and with IEEE division and square root: an update gives the CPU's bits. The
// reductions add in an order fixed by the launch shape alone (no atomics): the same bits run
// after run on one GPU model, the CPU's within rounding.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "absl/status/status.h"
#include "nn/optim/adamw_coefficients.h"

namespace troupe::nn::cuda {

// One AdamW step over [0, n) (nn/optim/adamw.h) with weight-decay factor `decay` (k.decay, or 1
// for a range without weight decay).
[[nodiscard]] absl::Status adamw_update(float* params, const float* grads, float* m, float* v,
                                        size_t n, const AdamWCoefficients& k, float decay,
                                        cudaStream_t stream);

// One SGD step over [0, n) (nn/optim/sgd.h): momentum_buffer null when mu == 0; `first` at step 1.
[[nodiscard]] absl::Status sgd_update(float* params, const float* grads, float* momentum_buffer,
                                      size_t n, float weight_decay, float mu,
                                      float one_minus_dampening, bool nesterov, bool first,
                                      float neg_lr, cudaStream_t stream);

// out[i] = in[i] rounded to bf16 (`bf16`) or fp16 to nearest even and back; out may be in.
[[nodiscard]] absl::Status round_to(float* out, const float* in, size_t n, bool bf16,
                                    cudaStream_t stream);

// dst[i] += src[i].
[[nodiscard]] absl::Status add(float* dst, const float* src, size_t n, cudaStream_t stream);

// g[i] *= coef.
[[nodiscard]] absl::Status scale(float* g, size_t n, float coef, cudaStream_t stream);

// Device scratch for the reductions below: kReductionBlocks doubles of partial results and one
// result word.
inline constexpr int kReductionBlocks = 256;
struct ReductionScratch {
  double* partials = nullptr;  // kReductionBlocks
  double* result = nullptr;    // 1
};

// *scratch.result = sum of g[i]^2 in double.
[[nodiscard]] absl::Status sum_of_squares(const float* g, size_t n, ReductionScratch scratch,
                                          cudaStream_t stream);
// *scratch.result = 1 if some g[i] is infinite or NaN, else 0.
[[nodiscard]] absl::Status any_inf_or_nan(const float* g, size_t n, ReductionScratch scratch,
                                          cudaStream_t stream);

}  // namespace troupe::nn::cuda
