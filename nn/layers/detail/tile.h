// The register-blocked product at the core of attention: a tile of up to 4 x 16 outputs
//   out[j, c] (=, +=) sum over s in [s0, s1) of p(j, s) * m[s, c],   p(j, s) = p[j*sj + s*ss],
// with p read through two strides so that it is a matrix or its transpose without copying.
// Each output sums its terms in s order and is then stored or added once, whichever path runs:
// the same bits for any tiling. Written with GCC vector extensions: eight 8-float accumulators
// (AVX registers in an AVX2 clone, pairs of SSE registers in the baseline).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>

#include "nn/layers/detail/clones.h"

namespace troupe::nn::detail {

inline constexpr int kTileRows = 4;
inline constexpr int kTileCols = 16;

typedef float Float8 __attribute__((vector_size(32)));

// REQUIRES: 1 <= rows <= 4, 1 <= cols <= 16. m_row_readable: the 16 floats from m[s, 0] may be
// read for every s (padding), even where cols < 16; otherwise only cols are read.
template <bool kAccumulate>
TROUPE_NN_LAYER_INLINE void tile(float* out, size_t ldo, const float* p, size_t sj, size_t ss,
                                 const float* m, size_t ldm, int s0, int s1, int rows, int cols,
                                 bool m_row_readable) {
  if (cols < kTileCols && !m_row_readable) {
    for (int j = 0; j < rows; j++) {
      for (int c = 0; c < cols; c++) {
        float acc = 0.0f;
        for (int s = s0; s < s1; s++)
          acc += p[j * sj + s * ss] * m[s * ldm + c];
        float& o = out[j * ldo + c];
        o = kAccumulate ? o + acc : acc;
      }
    }
    return;
  }
  // Rows past `rows` read row rows - 1 again (in bounds) and are not stored.
  const float* p0 = p;
  const float* p1 = p + std::min(1, rows - 1) * sj;
  const float* p2 = p + std::min(2, rows - 1) * sj;
  const float* p3 = p + std::min(3, rows - 1) * sj;
  Float8 acc[kTileRows][2] = {};
  for (int s = s0; s < s1; s++) {
    Float8 m0, m1;  // loaded here, not by a function: a 32-byte vector return breaks the ABI
    std::memcpy(&m0, m + s * ldm, sizeof m0);
    std::memcpy(&m1, m + s * ldm + 8, sizeof m1);
    const size_t o = s * ss;
    acc[0][0] += p0[o] * m0;
    acc[0][1] += p0[o] * m1;
    acc[1][0] += p1[o] * m0;
    acc[1][1] += p1[o] * m1;
    acc[2][0] += p2[o] * m0;
    acc[2][1] += p2[o] * m1;
    acc[3][0] += p3[o] * m0;
    acc[3][1] += p3[o] * m1;
  }
  for (int j = 0; j < rows; j++) {
    float values[kTileCols];
    std::memcpy(values, &acc[j][0], sizeof(Float8));
    std::memcpy(values + 8, &acc[j][1], sizeof(Float8));
    float* o = out + j * ldo;
    for (int c = 0; c < cols; c++)
      o[c] = kAccumulate ? o[c] + values[c] : values[c];
  }
}

}  // namespace troupe::nn::detail
