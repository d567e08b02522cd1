// AdamW (Adam with decoupled weight decay) on a flat fp32 slice, with the
// semantics of torch.optim.AdamW.
//
// The state of a slice of N parameters is two fp32 buffers of N, m (first
// moment, torch's exp_avg) and v (second moment, exp_avg_sq), zero before
// step 1. A ParamShardActor owns params, m and v for its slice
// [offset, offset + N) of the model and calls adamw_update once per applied
// step; a skipped step (fp16 overflow) calls nothing and does not advance
// `step`.
//
// The update, per element, in fp32 in exactly this order (the order of
// PyTorch 1.13 `_single_tensor_adamw`, also the default `foreach=False`
// path; `_multi_tensor_adamw` computes the same):
//
//   decay  = f32(1 - lr * wd)                      [scalars in fp64, then f32]
//   p      = p * decay                             [p * 1 == p where wd is 0]
//   m      = f32(b1) * m + f32(1 - b1) * g
//   v      = f32(b2) * v + (f32(1 - b2) * g) * g
//   denom  = sqrt(v) / f32(sqrt(1 - b2^t)) + eps
//   p      = p + (f32(-lr / (1 - b1^t)) * m) / denom
//
// Each * + / and sqrt rounds to fp32, with no fused multiply-add (the
// x86-64 baseline has no FMA; a build that adds one via -march must compile
// nn/optim with -ffp-contract=off, or GCC fuses). PyTorch's AVX2 CPU kernels
// and its CUDA kernels fuse the two moment updates into FMAs, so m and v can
// differ from torch's in the last bit for a fraction of elements (on random
// data about 10% of m and 0.3% of v) and p by an ulp or two; PyTorch 2.x
// also computes m as lerp(m, g, 1 - b1), which rounds differently again. We
// keep the unfused form: it is the same on every CPU, so replicas that apply
// the same update stay bit-identical, and it runs at memory bandwidth.
#pragma once

#include <cstddef>
#include <span>

#include "absl/status/status.h"
#include "nn/optim/adamw_coefficients.h"
#include "nn/optim/param_range.h"

namespace troupe::nn {

struct AdamWConfig {
  // The base (peak) learning rate, from which a schedule scales (see
  // schedule.h). adamw_update uses its `lr` argument, this step's rate.
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;  // GPT pretraining usually uses 0.95
  float eps = 1e-8f;
  float weight_decay = 0.0f;  // decoupled: p -= lr * weight_decay * p
};

// The scalars of step `step` at rate `lr` (adamw_coefficients.h).
inline AdamWCoefficients adamw_coefficients(const AdamWConfig& c, float lr, int step) {
  return adamw_coefficients(c.beta1, c.beta2, c.eps, c.weight_decay, lr, step);
}

// OK if `c` is in torch.optim.AdamW's domain (lr >= 0, eps >= 0,
// 0 <= beta < 1, weight_decay >= 0, all finite); InvalidArgument naming the
// field otherwise.
[[nodiscard]] absl::Status validate(const AdamWConfig& c);

// One AdamW step over params[0, n), in place on params, m and v.
// REQUIRES: step >= 1 is the 1-based count of applied updates (t above); the
// four buffers hold n floats each and do not overlap; m and v hold the state
// left by step - 1 (zeros before step 1); validate(c) is OK; lr >= 0.
// Elements are independent: disjoint sub-ranges may be updated on different
// threads with bit-identical results.
void adamw_update(float* params, const float* grads, float* m, float* v, size_t n,
                  const AdamWConfig& c, float lr, int step);

// As above, but weight decay applies only outside `no_decay`: ranges of
// [0, n) (sorted, disjoint; see validate_ranges and ranges_in_shard) whose
// parameters are updated with weight_decay = 0, as GPT trainers do for
// biases and LayerNorm weights. Same cost as the plain update.
void adamw_update(float* params, const float* grads, float* m, float* v, size_t n,
                  const AdamWConfig& c, float lr, int step, std::span<const ParamRange> no_decay);

// adamw_update over `threads` OpenMP threads, each on one contiguous slice (boundaries on
// multiples of 16 elements): bit for bit the update on one thread, as the update is elementwise.
// For a model's whole buffer in the thread that runs its kernels (nn::num_threads()); a
// ParamShardActor that already runs one shard per thread calls adamw_update.
void adamw_update_parallel(float* params, const float* grads, float* m, float* v, size_t n,
                           const AdamWConfig& c, float lr, int step,
                           std::span<const ParamRange> no_decay, int threads);

}  // namespace troupe::nn
