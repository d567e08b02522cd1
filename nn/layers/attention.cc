#include "nn/layers/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "nn/layers/detail/clones.h"
#include "nn/layers/detail/exp.h"
#include "nn/layers/detail/softmax_row.h"
#include "nn/layers/detail/tile.h"
#include "nn/threads.h"

namespace troupe::nn {
namespace {

using detail::kTileCols;
using detail::kTileRows;

// One (batch, head) pair works on: qkv, at q[0] of the head (q, k, v of position t at
// qkv + t*ld, + C, + 2C; ld = 3C); y or dy, at channel h*hs of position 0 (row stride C); att, the
// head's [T, T] block. Every product is a sum of detail::tile calls over causal ranges only:
// entries above the diagonal are zeros in att (and in the backward's dpreatt), so a tile that
// straddles the diagonal adds exact zeros.

// mt[hs, Tp] = m[0:T, 0:hs]^T (row stride ld), columns [T, Tp) zero.
TROUPE_NN_LAYER_INLINE void transpose_head(float* mt, const float* m, int T, int Tp, int hs,
                                           size_t ld) {
  for (int i = 0; i < hs; i++) {
    float* dst = mt + static_cast<size_t>(i) * Tp;
    for (int t = 0; t < T; t++)
      dst[t] = m[t * ld + i];
    for (int t = T; t < Tp; t++)
      dst[t] = 0.0f;
  }
}

// out[r0 + j, 0:n) = a[r0 + j, 0:hs] . mt[:, 0:n) for the rows of one query block: the scores
// of rows [r0, r0 + rows) against every position they may attend to. a has row stride lda.
TROUPE_NN_LAYER_INLINE void scores(float* out, const float* a, size_t lda, const float* mt, int r0,
                                   int rows, int T, int Tp, int hs) {
  const int n = r0 + rows;
  for (int c0 = 0; c0 < n; c0 += kTileCols) {
    detail::tile<false>(out + static_cast<size_t>(r0) * T + c0, T, a + r0 * lda, lda, 1, mt + c0,
                        Tp, 0, hs, rows, std::min(kTileCols, T - c0), /*m_row_readable=*/true);
  }
}

// out[r0 + j, 0:hs) (=, +=) sum over s of p[r0 + j, s] * m[s, 0:hs), s in [0, r0 + rows):
// y = att v, and dq = dpreatt k.
template <bool kAccumulate>
TROUPE_NN_LAYER_INLINE void rows_times(float* out, size_t ldo, const float* p, int T,
                                       const float* m, size_t ldm, int r0, int rows, int hs) {
  for (int c0 = 0; c0 < hs; c0 += kTileCols) {
    detail::tile<kAccumulate>(out + r0 * ldo + c0, ldo, p + static_cast<size_t>(r0) * T, T, 1,
                              m + c0, ldm, 0, r0 + rows, rows, std::min(kTileCols, hs - c0), false);
  }
}

// out[s0 + j, 0:hs) += sum over s of p[s, s0 + j] * m[s, 0:hs), s in [s0, T): dv = att^T dy and
// dk = dpreatt^T q.
TROUPE_NN_LAYER_INLINE void columns_times(float* out, size_t ldo, const float* p, int T,
                                          const float* m, size_t ldm, int s0, int rows, int hs) {
  for (int c0 = 0; c0 < hs; c0 += kTileCols) {
    detail::tile<true>(out + s0 * ldo + c0, ldo, p + s0, 1, T, m + c0, ldm, s0, T, rows,
                       std::min(kTileCols, hs - c0), false);
  }
}

// row[0:t] = softmax(scale * row[0:t]) and row[t+1:T) = 0.
TROUPE_NN_LAYER_INLINE void causal_softmax(float* row, int t, int T, float scale) {
  const float maxval = detail::row_max(row, t + 1);
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int t2 = 0; t2 <= t; t2++) {
    row[t2] = detail::exp_fast(scale * (row[t2] - maxval));
    sum += row[t2];
  }
  const float inv = 1.0f / sum;
  for (int t2 = 0; t2 <= t; t2++)
    row[t2] *= inv;
  for (int t2 = t + 1; t2 < T; t2++)
    row[t2] = 0.0f;
}

// kt [hs, Tp]: scratch.
TROUPE_NN_LAYER_CLONES void head_forward(float* y, float* att, const float* qkv, float* kt, int T,
                                         int Tp, int C, int hs, float scale) {
  const size_t ld = static_cast<size_t>(3) * C;
  transpose_head(kt, qkv + C, T, Tp, hs, ld);
  for (int r0 = 0; r0 < T; r0 += kTileRows) {
    const int rows = std::min(kTileRows, T - r0);
    scores(att, qkv, ld, kt, r0, rows, T, Tp, hs);
    for (int t = r0; t < r0 + rows; t++)
      causal_softmax(att + static_cast<size_t>(t) * T, t, T, scale);
    rows_times<false>(y, C, att, T, qkv + 2 * C, ld, r0, rows, hs);
  }
}

// vt [hs, Tp] and dpre [T, T]: scratch.
TROUPE_NN_LAYER_CLONES void head_backward(float* dqkv, const float* dy, const float* qkv,
                                          const float* att, float* vt, float* dpre, int T, int Tp,
                                          int C, int hs, float scale) {
  const size_t ld = static_cast<size_t>(3) * C;
  transpose_head(vt, qkv + 2 * C, T, Tp, hs, ld);
  for (int r0 = 0; r0 < T; r0 += kTileRows) {
    const int rows = std::min(kTileRows, T - r0);
    // datt = dy v^T, then the softmax backward and the 1/sqrt(hs) in place:
    // dpreatt = att * (datt - sum(att * datt)) * scale, zero above the diagonal.
    scores(dpre, dy, C, vt, r0, rows, T, Tp, hs);
    for (int t = r0; t < r0 + rows; t++) {
      const float* a = att + static_cast<size_t>(t) * T;
      float* d = dpre + static_cast<size_t>(t) * T;
      float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
      for (int t2 = 0; t2 <= t; t2++)
        dot += a[t2] * d[t2];
      for (int t2 = 0; t2 <= t; t2++)
        d[t2] = a[t2] * (d[t2] - dot) * scale;
      for (int t2 = t + 1; t2 < T; t2++)
        d[t2] = 0.0f;
    }
    rows_times<true>(dqkv, ld, dpre, T, qkv + C, ld, r0, rows, hs);  // dq += dpreatt k
  }
  for (int s0 = 0; s0 < T; s0 += kTileRows) {
    const int rows = std::min(kTileRows, T - s0);
    columns_times(dqkv + C, ld, dpre, T, qkv, ld, s0, rows, hs);   // dk += dpreatt^T q
    columns_times(dqkv + 2 * C, ld, att, T, dy, C, s0, rows, hs);  // dv += att^T dy
  }
}

int padded(int T) {
  return (T + kTileCols - 1) / kTileCols * kTileCols;
}

}  // namespace

void attention_forward(float* out, float* att, const float* inp, int B, int T, int C, int NH) {
  const int hs = C / NH;
  const int Tp = padded(T);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
#pragma omp parallel num_threads(num_threads())
  {
    std::vector<float> kt(static_cast<size_t>(hs) * Tp);
#pragma omp for collapse(2) schedule(static)
    for (int b = 0; b < B; b++) {
      for (int h = 0; h < NH; h++) {
        const size_t bt = static_cast<size_t>(b) * T;
        head_forward(out + bt * C + h * hs, att + (static_cast<size_t>(b) * NH + h) * T * T,
                     inp + bt * 3 * C + h * hs, kt.data(), T, Tp, C, hs, scale);
      }
    }
  }
}

void attention_backward(float* dinp, const float* dout, const float* inp, const float* att, int B,
                        int T, int C, int NH) {
  const int hs = C / NH;
  const int Tp = padded(T);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  // Task (b, h) writes only the head-h channels of dq, dk, dv at batch b: disjoint across tasks.
#pragma omp parallel num_threads(num_threads())
  {
    std::vector<float> vt(static_cast<size_t>(hs) * Tp), dpre(static_cast<size_t>(T) * T);
#pragma omp for collapse(2) schedule(static)
    for (int b = 0; b < B; b++) {
      for (int h = 0; h < NH; h++) {
        const size_t bt = static_cast<size_t>(b) * T;
        const size_t head = bt * 3 * C + h * hs;
        head_backward(dinp + head, dout + bt * C + h * hs, inp + head,
                      att + (static_cast<size_t>(b) * NH + h) * T * T, vt.data(), dpre.data(), T,
                      Tp, C, hs, scale);
      }
    }
  }
}

}  // namespace troupe::nn
