#include "nn/optim/sgd.h"

#include <cassert>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace troupe::nn {
namespace {

absl::Status check_field(bool ok, const char* field, float value, const char* domain) {
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("SGD config: ", field, " = ", value, " is outside ", domain));
}

// The branches on wd, first and nesterov are loop-invariant: -O3 unswitches
// them, and each resulting loop vectorises.
void update_without_momentum(float* __restrict params, const float* __restrict grads, size_t n,
                             float wd, float neg_lr) {
  for (size_t i = 0; i < n; ++i) {
    float d = wd != 0 ? grads[i] + wd * params[i] : grads[i];
    params[i] = params[i] + neg_lr * d;
  }
}

void update_with_momentum(float* __restrict params, const float* __restrict grads,
                          float* __restrict buffer, size_t n, float wd, float mu,
                          float one_minus_dampening, bool nesterov, bool first, float neg_lr) {
  for (size_t i = 0; i < n; ++i) {
    float d = wd != 0 ? grads[i] + wd * params[i] : grads[i];
    float b = first ? d : mu * buffer[i] + one_minus_dampening * d;
    buffer[i] = b;
    d = nesterov ? d + mu * b : b;
    params[i] = params[i] + neg_lr * d;
  }
}

}  // namespace

absl::Status validate(const SgdConfig& c) {
  for (absl::Status s : {
           check_field(std::isfinite(c.lr) && c.lr >= 0, "lr", c.lr, "[0, inf)"),
           check_field(std::isfinite(c.momentum) && c.momentum >= 0, "momentum", c.momentum,
                       "[0, inf)"),
           check_field(std::isfinite(c.dampening), "dampening", c.dampening, "the finite floats"),
           check_field(std::isfinite(c.weight_decay) && c.weight_decay >= 0, "weight_decay",
                       c.weight_decay, "[0, inf)"),
       }) {
    if (!s.ok()) return s;
  }
  if (c.nesterov && (c.momentum <= 0 || c.dampening != 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "SGD config: nesterov needs momentum > 0 and dampening = 0 (got momentum = ", c.momentum,
        ", dampening = ", c.dampening, ")"));
  }
  return absl::OkStatus();
}

void sgd_update(float* params, const float* grads, float* momentum_buffer, size_t n,
                const SgdConfig& c, float lr, int step) {
  assert(step >= 1);
  const float neg_lr = -lr;
  if (c.momentum == 0) {
    update_without_momentum(params, grads, n, c.weight_decay, neg_lr);
    return;
  }
  assert(momentum_buffer != nullptr || n == 0);
  const float one_minus_dampening = static_cast<float>(1.0 - static_cast<double>(c.dampening));
  update_with_momentum(params, grads, momentum_buffer, n, c.weight_decay, c.momentum,
                       one_minus_dampening, c.nesterov, step == 1, neg_lr);
}

}  // namespace troupe::nn
