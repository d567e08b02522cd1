#include "nn/layers/gelu.h"

#include <omp.h>

#include <cstdint>

#include "nn/layers/detail/clones.h"
#include "nn/layers/detail/exp.h"
#include "nn/layers/detail/partition.h"
#include "nn/threads.h"

namespace troupe::nn {
namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;

// 0.5 (1 + tanh(u)) == 1 / (1 + exp(-2u)), so gelu(x) = x * sigmoid(2u): one exp, no tanh.
inline float sigmoid_2u(float x) {
  const float u = kSqrt2OverPi * (x + kCubic * x * x * x);
  return 1.0f / (1.0f + detail::exp_fast(-2.0f * u));
}

TROUPE_NN_LAYER_CLONES void forward_range(float* out, const float* inp, int64_t begin,
                                          int64_t end) {
#pragma omp simd
  for (int64_t i = begin; i < end; i++) {
    const float x = inp[i];
    out[i] = x * sigmoid_2u(x);
  }
}

// d/dx [x s(2u)] = s + x s (1 - s) 2 du/dx, du/dx = sqrt(2/pi) (1 + 3 * 0.044715 x^2).
template <bool kAccumulate>
TROUPE_NN_LAYER_INLINE void backward_loop(float* dinp, const float* dout, const float* inp,
                                          int64_t begin, int64_t end) {
#pragma omp simd
  for (int64_t i = begin; i < end; i++) {
    const float x = inp[i];
    const float s = sigmoid_2u(x);
    const float du = kSqrt2OverPi * (1.0f + 3.0f * kCubic * x * x);
    const float g = (s + 2.0f * x * s * (1.0f - s) * du) * dout[i];
    dinp[i] = kAccumulate ? dinp[i] + g : g;
  }
}

TROUPE_NN_LAYER_CLONES void backward_range(float* dinp, const float* dout, const float* inp,
                                           int64_t begin, int64_t end, bool accumulate) {
  if (accumulate) {
    backward_loop<true>(dinp, dout, inp, begin, end);
  } else {
    backward_loop<false>(dinp, dout, inp, begin, end);
  }
}

}  // namespace

void gelu_forward(float* out, const float* inp, size_t N) {
#pragma omp parallel num_threads(num_threads())
  {
    const detail::Chunk ch = detail::chunk_of(N, omp_get_thread_num(), omp_get_num_threads());
    forward_range(out, inp, ch.begin, ch.end);
  }
}

void gelu_backward(float* dinp, const float* dout, const float* inp, size_t N, bool accumulate) {
#pragma omp parallel num_threads(num_threads())
  {
    const detail::Chunk ch = detail::chunk_of(N, omp_get_thread_num(), omp_get_num_threads());
    backward_range(dinp, dout, inp, ch.begin, ch.end, accumulate);
  }
}

}  // namespace troupe::nn
