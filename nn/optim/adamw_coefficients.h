// The per-step scalars of an AdamW update (nn/optim/adamw.h), computed in fp64 as Python computes
// them in torch.optim.AdamW, then rounded once to fp32 as torch's kernels do. Every device's
// kernel takes these, so that an update gives the same bits on each. Plain C++17, so that CUDA
// sources include it too.
#pragma once

#include <cmath>

namespace troupe::nn {

struct AdamWCoefficients {
  float decay;  // 1 - lr * wd
  float beta1;
  float one_minus_beta1;
  float beta2;
  float one_minus_beta2;
  float bias_correction2_sqrt;  // sqrt(1 - b2^t)
  float eps;
  float neg_step_size;  // -lr / (1 - b1^t)
};

// REQUIRES: step >= 1.
inline AdamWCoefficients adamw_coefficients(float beta1, float beta2, float eps, float weight_decay,
                                            float lr, int step) {
  const double b1 = beta1, b2 = beta2, rate = lr;
  const double bias_correction1 = 1.0 - std::pow(b1, step);
  const double bias_correction2 = 1.0 - std::pow(b2, step);
  AdamWCoefficients k;
  k.decay = static_cast<float>(1.0 - rate * static_cast<double>(weight_decay));
  k.beta1 = beta1;
  k.one_minus_beta1 = static_cast<float>(1.0 - b1);
  k.beta2 = beta2;
  k.one_minus_beta2 = static_cast<float>(1.0 - b2);
  k.bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  k.eps = eps;
  k.neg_step_size = static_cast<float>(-(rate / bias_correction1));
  return k;
}

}  // namespace troupe::nn
