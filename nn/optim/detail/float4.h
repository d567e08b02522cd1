// Four fp32 lanes as a GCC/Clang vector type, for the few loops the compiler
// will not vectorise by itself: a loop that calls std::sqrt is left scalar
// while math functions may set errno (the default, -fmath-errno). Arithmetic
// on Float4 is lane-wise IEEE fp32, the same operations in the same order as
// the scalar code it replaces, so both give bit-identical results.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstring>

#if defined(__SSE__)
#include <xmmintrin.h>
#endif

namespace troupe::nn::detail {

using Float4 = float __attribute__((vector_size(16)));
inline constexpr size_t kFloat4Lanes = 4;

inline Float4 load4(const float* p) {
  Float4 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

inline void store4(float* p, Float4 v) {
  std::memcpy(p, &v, sizeof(v));
}

// Correctly rounded square root, lane by lane (as std::sqrt).
inline Float4 sqrt_lanes(Float4 x) {
#if defined(__SSE__)
  return _mm_sqrt_ps(x);
#else
  for (size_t i = 0; i < kFloat4Lanes; ++i)
    x[i] = std::sqrt(x[i]);
  return x;
#endif
}

inline float sqrt_lanes(float x) {
  return std::sqrt(x);
}

}  // namespace troupe::nn::detail
