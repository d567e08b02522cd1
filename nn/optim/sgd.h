// SGD with momentum on a flat fp32 slice, with the semantics of
// torch.optim.SGD (PyTorch 1.13 `_single_tensor_sgd`).
//
// Per element, in fp32 in this order (g the gradient, b the momentum
// buffer, t the 1-based step):
//
//   d = g + wd * p                         [only if wd != 0: L2, not decoupled]
//   b = (t == 1) ? d : mu * b + (1 - dampening) * d      [only if mu != 0]
//   d = nesterov ? d + mu * b : b                        [only if mu != 0]
//   p = p + (-lr) * d
//
// At t == 1 the buffer is set to d, undamped, as torch does when it creates
// the buffer. Scalars are rounded once to fp32; no fused multiply-add (see
// adamw.h; torch's AVX2 kernels fuse, so results can differ from torch's in
// the last bits).
#pragma once

#include <cstddef>

#include "absl/status/status.h"

namespace troupe::nn {

struct SgdConfig {
  float lr = 1e-3f;  // base rate; sgd_update uses its `lr` argument
  float momentum = 0.0f;
  float dampening = 0.0f;
  float weight_decay = 0.0f;  // L2: added to the gradient
  bool nesterov = false;
};

// OK if `c` is in torch.optim.SGD's domain (lr, momentum, weight_decay >= 0
// and finite; nesterov only with momentum > 0 and dampening == 0);
// InvalidArgument naming the field otherwise.
[[nodiscard]] absl::Status validate(const SgdConfig& c);

// One SGD step over params[0, n), in place on params and momentum_buffer.
// REQUIRES: step >= 1 counts applied updates; momentum_buffer holds n floats
// (its contents are ignored at step 1) or is null when c.momentum == 0;
// buffers do not overlap; validate(c) is OK; lr >= 0.
void sgd_update(float* params, const float* grads, float* momentum_buffer, size_t n,
                const SgdConfig& c, float lr, int step);

}  // namespace troupe::nn
