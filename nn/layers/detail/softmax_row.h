// Row pieces of a numerically stable softmax, shared by softmax, cross-entropy and the
// vocab-parallel cross-entropy. Vectorised; for a fixed binary each reduces in a fixed order.
#pragma once

#include <cmath>

#include "nn/layers/detail/clones.h"
#include "nn/layers/detail/exp.h"

namespace troupe::nn::detail {

// Largest of x[0, n); -INFINITY when n == 0.
TROUPE_NN_LAYER_INLINE float row_max(const float* x, int n) {
  float m = -INFINITY;
#pragma omp simd reduction(max : m)
  for (int i = 0; i < n; i++)
    m = x[i] > m ? x[i] : m;
  return m;
}

// Sum of exp(x[i] - shift) over [0, n).
TROUPE_NN_LAYER_INLINE float row_sum_exp(const float* x, int n, float shift) {
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int i = 0; i < n; i++)
    s += exp_fast(x[i] - shift);
  return s;
}

// dx[i] += scale * exp(x[i] - lse) over [0, n): the softmax part of the cross-entropy gradient.
TROUPE_NN_LAYER_INLINE void row_add_softmax(float* dx, const float* x, int n, float lse,
                                            float scale) {
#pragma omp simd
  for (int i = 0; i < n; i++)
    dx[i] += scale * exp_fast(x[i] - lse);
}

}  // namespace troupe::nn::detail
