// A vectorisable exp for the layers' inner loops (softmax, GELU). libm's expf is a call that the
// compiler cannot vectorise without -ffast-math; this is plain arithmetic that it can.
#pragma once

#include <bit>
#include <cstdint>

#include "nn/layers/detail/clones.h"

namespace troupe::nn::detail {

// a if c else b, as bit operations: a ternary here can become a branch (GCC threads the clamped
// constant through the caller) and a branch stops the loop from vectorising.
TROUPE_NN_LAYER_INLINE float select(bool c, float a, float b) {
  const int32_t mask = -static_cast<int32_t>(c);
  return std::bit_cast<float>((mask & std::bit_cast<int32_t>(a)) |
                              (~mask & std::bit_cast<int32_t>(b)));
}

// exp(x) within 3 ulp for x in [-87.3, 88.3]. Inputs below saturate to exp(-87.3) ~ 1.2e-38
// (never 0 or denormal; -inf included), inputs above to exp(88.3) ~ 2.2e38 (never inf); NaN gives
// NaN. Range reduction x = n ln2 + r, |r| <= ln2 / 2, then a degree-7 polynomial for exp(r)
// (Cephes' coefficients) and the exponent bits for 2^n.
TROUPE_NN_LAYER_INLINE float exp_fast(float x) {
  x = select(x < -87.3f, -87.3f, x);
  x = select(x > 88.3f, 88.3f, x);
  // Adding 1.5 * 2^23 rounds x / ln2 to the nearest integer in the low mantissa bits.
  constexpr float kRound = 12582912.0f;
  float shifted = x * 1.44269504088896341f + kRound;
  float n = shifted - kRound;
  int32_t ni = std::bit_cast<int32_t>(shifted) - std::bit_cast<int32_t>(kRound);
  // ln2 in two parts, so that n * ln2_hi is exact.
  float r = x - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  float scale = std::bit_cast<float>((ni + 127) << 23);
  return p * scale;
}

}  // namespace troupe::nn::detail
