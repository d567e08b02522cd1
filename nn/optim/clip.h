// Global-norm gradient clipping (torch.nn.utils.clip_grad_norm_ with the L2
// norm), split so that shards can compute it together:
//
//   1. each shard: partial = grad_norm_squared(its gradients)
//   2. all shards: total = sum of partials (an allreduce)
//   3. each shard: clip = clip_coefficient(total, max_norm), then
//      scale_grads(its gradients, clip->coef) if clip->clipped
//
// Determinism: grad_norm_squared sums squares in fp64 in a fixed order that
// depends only on n (blocks of kNormBlock elements, eight lanes within a
// block, lanes and blocks combined in index order), never on threads or
// vector width: the same buffer gives the same bits on every run and every
// machine. Different splits of a buffer give partial sums that agree to
// about 1e-15 relative, not bit for bit; their fp32 norm and coefficient
// agree except in the rarest rounding cases.
#pragma once

#include <cstddef>
#include <span>

#include "absl/status/statusor.h"

namespace troupe::nn {

inline constexpr size_t kNormBlock = 4096;

// Sum of g[i]^2 over [0, n), each square exact in fp64. inf or nan if any
// element is inf or nan (or the sum overflows fp64, which fp32 inputs cannot).
double grad_norm_squared(const float* g, size_t n);

// The same over several buffers, their partials added in the given order.
double grad_norm_squared(std::span<const std::span<const float>> buffers);

struct GradClip {
  double norm = 0;       // the global L2 norm, sqrt(total norm squared)
  float coef = 1;        // what to multiply every gradient by
  bool clipped = false;  // coef < 1
};

// From the total squared norm of all gradients: coef = max_norm / (norm +
// 1e-6) when that is below 1, else 1 (clipped = false), as torch.
// max_norm <= 0 disables clipping (DeepSpeed's gradient_clipping = 0): coef
// is 1 but the norm is still checked. InvalidArgument if the norm is inf or
// nan (a gradient overflowed: with fp16, skip the step and lower the loss
// scale; otherwise the step must not be applied).
absl::StatusOr<GradClip> clip_coefficient(double total_norm_squared, float max_norm);

// g[i] *= coef over [0, n) (torch's g.mul_(clip_coef_clamped)).
void scale_grads(float* g, size_t n, float coef);

}  // namespace troupe::nn
