#include "nn/layers/swiglu.h"

#include <cstddef>

#include "nn/layers/detail/clones.h"
#include "nn/layers/detail/exp.h"
#include "nn/threads.h"

namespace troupe::nn {
namespace {

// sigmoid(x) = 1 / (1 + exp(-x)), with the layers' vectorisable exp (detail/exp.h): the loops
// below run 16 wide on AVX-512 where libm's expf would be a call per element.
TROUPE_NN_LAYER_INLINE float sigmoid(float x) {
  return 1.0f / (1.0f + detail::exp_fast(-x));
}

TROUPE_NN_LAYER_CLONES void row_forward(float* y, const float* gate, const float* up, int I) {
#pragma omp simd
  for (int i = 0; i < I; i++) {
    const float g = gate[i];
    y[i] = g / (1.0f + detail::exp_fast(-g)) * up[i];
  }
}

// d/dg [g s(g)] = s (1 + g (1 - s)).
TROUPE_NN_LAYER_CLONES void row_backward(float* dgate, float* dup, const float* dy,
                                         const float* gate, const float* up, int I) {
#pragma omp simd
  for (int i = 0; i < I; i++) {
    const float g = gate[i], s = sigmoid(g);
    dgate[i] = dy[i] * up[i] * (s * (1.0f + g * (1.0f - s)));
    dup[i] = dy[i] * (g * s);
  }
}

}  // namespace

void swiglu_forward(float* out, const float* gu, int B, int T, int I) {
  const int BT = B * T;
#pragma omp parallel for schedule(static) num_threads(num_threads())
  for (int row = 0; row < BT; row++) {
    const float* gate = gu + static_cast<size_t>(row) * 2 * I;
    row_forward(out + static_cast<size_t>(row) * I, gate, gate + I, I);
  }
}

void swiglu_backward(float* dgu, const float* dout, const float* gu, int B, int T, int I) {
  const int BT = B * T;
#pragma omp parallel for schedule(static) num_threads(num_threads())
  for (int row = 0; row < BT; row++) {
    const size_t off = static_cast<size_t>(row) * 2 * I;
    row_backward(dgu + off, dgu + off + I, dout + static_cast<size_t>(row) * I, gu + off,
                 gu + off + I, I);
  }
}

}  // namespace troupe::nn
