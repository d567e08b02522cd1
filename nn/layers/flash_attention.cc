// Causal attention that never stores the [T, T] probabilities (nn/layers/attention.h,
// flash_attention_forward/backward). Per (batch, head) pair, query blocks of kBlock rows: the
// scores of a block against the keys it may attend to go to a kBlock x T scratch, the softmax
// runs over whole rows there (exactly, no online rescaling), and the products read it from
// there. The forward keeps one log-sum-exp per row; the backward recomputes the probabilities
// from it. Every product is one register-blocked kernel, written with GCC vector extensions and
// compiled twice: 16-wide with FMA for AVX-512 CPUs, 8-wide (the layers' AVX2 / baseline clones)
// elsewhere, picked once at the first call.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "nn/layers/attention.h"
#include "nn/layers/detail/clones.h"
#include "nn/layers/detail/exp.h"
#include "nn/threads.h"

namespace troupe::nn {
namespace {

// Query rows per block: a multiple of every kernel's row and column tile.
constexpr int kBlock = 32;

template <int W>
struct VecOf;
template <>
struct VecOf<16> {
  typedef float type __attribute__((vector_size(64)));
};
template <>
struct VecOf<8> {
  typedef float type __attribute__((vector_size(32)));
};

int round_up(int n, int m) {
  return (n + m - 1) / m * m;
}

// out[j, 0:NV*W) (=, +=) sum over s in [s0, s1) of p(j, s) * m[s, 0:NV*W) for j < MR,
// p(j, s) = p[j*sj + s*ss]. Each output adds its terms in s order (onto out's value with
// kAccumulate): the same bits for a given kernel whatever calls it. Vectors are loaded and
// stored with memcpy, never passed to or returned from a function (a wide vector in a call
// breaks the ABI of the baseline clone).
template <int W, int MR, int NV, bool kAccumulate>
TROUPE_NN_LAYER_INLINE void kernel(float* out, size_t ldo, const float* p, size_t sj, size_t ss,
                                   const float* m, size_t ldm, int s0, int s1) {
  typedef typename VecOf<W>::type V;
  V acc[MR][NV];
#pragma GCC unroll 8
  for (int j = 0; j < MR; j++) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++) {
      if constexpr (kAccumulate) {
        std::memcpy(&acc[j][v], out + j * ldo + v * W, sizeof(V));
      } else {
        acc[j][v] = V{};
      }
    }
  }
  for (int s = s0; s < s1; s++) {
    V mv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++)
      std::memcpy(&mv[v], m + s * ldm + v * W, sizeof(V));
    const float* ps = p + s * ss;
#pragma GCC unroll 8
    for (int j = 0; j < MR; j++) {
      const float pj = ps[j * sj];
#pragma GCC unroll 4
      for (int v = 0; v < NV; v++)
        acc[j][v] += pj * mv[v];
    }
  }
#pragma GCC unroll 8
  for (int j = 0; j < MR; j++) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++)
      std::memcpy(out + j * ldo + v * W, &acc[j][v], sizeof(V));
  }
}

// Row tile of the score products (kBlock x keys): MR rows x 2 vectors.
template <int W>
constexpr int kScoreRows = W == 16 ? 8 : 4;

// S[i, c] = sum over d < hs of a[(r0 + i), d] * mt[d, c] for the rows i < kBlock of block r0 and
// the columns c < r0 + kBlock, skipping tiles wholly above the diagonal (c > r0 + i): their
// entries are left as they were and must be overwritten by the caller. a: row stride lda; mt:
// [hs, Tp].
template <int W>
TROUPE_NN_LAYER_INLINE void block_scores(float* S, size_t ldS, const float* a, size_t lda,
                                         const float* mt, int Tp, int r0, int hs) {
  constexpr int MR = kScoreRows<W>;
  constexpr int CT = 2 * W;
  for (int i0 = 0; i0 < kBlock; i0 += MR) {
    const int last = r0 + i0 + MR - 1;  // the tile's last row: it attends to columns <= last
    for (int c0 = 0; c0 <= last; c0 += CT) {
      kernel<W, MR, 2, false>(S + i0 * ldS + c0, ldS, a + (r0 + i0) * lda, lda, 1, mt + c0, Tp, 0,
                              hs);
    }
  }
}

// Rows per tile of the products over hs columns, for NV vectors: at most 16 accumulators.
template <int W, int NV>
constexpr int kRows = W == 16 ? (NV >= 4 ? 4 : 8) : 4;

// Column groups [c, c + NV*W) covering [0, hsp): groups of 4 vectors (AVX-512) or 2 (AVX2),
// then the rest. Written out (no lambdas: a lambda would not inherit the caller's target).
#define TROUPE_FLASH_COLUMN_GROUPS(W, CALL)            \
  do {                                                 \
    constexpr int kGroup = (W) == 16 ? 4 : 2;          \
    int c = 0;                                         \
    for (; c + kGroup * (W) <= hsp; c += kGroup * (W)) \
      CALL(kGroup);                                    \
    if constexpr (kGroup == 4) {                       \
      if (c + 2 * (W) <= hsp) {                        \
        CALL(2);                                       \
        c += 2 * (W);                                  \
      }                                                \
    }                                                  \
    if (c < hsp) CALL(1);                              \
  } while (0)

// out[i, c:c+NV*W) (=, +=) sum over s of p[i, s] m[s, c:c+NV*W) for the block's rows i < kBlock,
// s over the causal range of each row tile (< r0 + i0 + MR; p is zero beyond each row's
// diagonal). p: [kBlock, ldp]; m and out: row stride hsp.
template <int W, int NV, bool kAccumulate>
TROUPE_NN_LAYER_INLINE void rows_times_group(float* out, const float* p, size_t ldp, const float* m,
                                             int hsp, int r0, int c) {
  constexpr int MR = kRows<W, NV>;
  for (int i0 = 0; i0 < kBlock; i0 += MR) {
    kernel<W, MR, NV, kAccumulate>(out + i0 * hsp + c, hsp, p + i0 * ldp, ldp, 1, m + c, hsp, 0,
                                   r0 + i0 + MR);
  }
}

template <int W, bool kAccumulate>
TROUPE_NN_LAYER_INLINE void block_rows_times(float* out, const float* p, size_t ldp, const float* m,
                                             int hsp, int r0) {
#define TROUPE_FLASH_CALL(NV) rows_times_group<W, NV, kAccumulate>(out, p, ldp, m, hsp, r0, c)
  TROUPE_FLASH_COLUMN_GROUPS(W, TROUPE_FLASH_CALL);
#undef TROUPE_FLASH_CALL
}

// out[j, c:c+NV*W) += sum over the block's rows i of p[i, j] m[r0 + i, c:c+NV*W), for keys
// j < r0 + kBlock; only rows i with r0 + i >= j contribute (p is zero elsewhere). p: [kBlock,
// ldp]; m and out: [Tp, hsp].
template <int W, int NV>
TROUPE_NN_LAYER_INLINE void columns_times_group(float* out, const float* p, size_t ldp,
                                                const float* m, int hsp, int r0, int c) {
  constexpr int MR = kRows<W, NV>;
  for (int j0 = 0; j0 < r0 + kBlock; j0 += MR) {
    const int s0 = std::max(0, j0 - r0);
    kernel<W, MR, NV, true>(out + j0 * hsp + c, hsp, p + j0, 1, ldp, m + r0 * hsp + c, hsp, s0,
                            kBlock);
  }
}

template <int W>
TROUPE_NN_LAYER_INLINE void block_columns_times(float* out, const float* p, size_t ldp,
                                                const float* m, int hsp, int r0) {
#define TROUPE_FLASH_CALL(NV) columns_times_group<W, NV>(out, p, ldp, m, hsp, r0, c)
  TROUPE_FLASH_COLUMN_GROUPS(W, TROUPE_FLASH_CALL);
#undef TROUPE_FLASH_CALL
}

// dst[t, 0:cols) = src[t, 0:cols) (row stride ld) for t < T, zero elsewhere in [Tp, ldd).
TROUPE_NN_LAYER_INLINE void load_rows(float* dst, size_t ldd, const float* src, size_t ld, int T,
                                      int Tp, int cols) {
  for (int t = 0; t < Tp; t++) {
    float* d = dst + t * ldd;
    int c = 0;
    if (t < T) {
      std::memcpy(d, src + t * ld, sizeof(float) * cols);
      c = cols;
    }
    std::memset(d + c, 0, sizeof(float) * (ldd - c));
  }
}

// mt[d, t] = m[t, d] for d < hs, t < T; zero for t in [T, Tp).
TROUPE_NN_LAYER_INLINE void load_transposed(float* mt, const float* m, size_t ld, int T, int Tp,
                                            int hs) {
  for (int d = 0; d < hs; d++) {
    float* dst = mt + static_cast<size_t>(d) * Tp;
    for (int t = 0; t < T; t++)
      dst[t] = m[t * ld + d];
    for (int t = T; t < Tp; t++)
      dst[t] = 0.0f;
  }
}

// Per-thread scratch, 64-byte aligned.
class Scratch {
 public:
  explicit Scratch(size_t floats) {
    const size_t bytes = (floats * sizeof(float) + 63) / 64 * 64;
    data_ = static_cast<float*>(std::aligned_alloc(64, bytes > 0 ? bytes : 64));
  }
  ~Scratch() { std::free(data_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  float* take(size_t n) {
    float* p = data_ + used_;
    used_ += (n + 15) / 16 * 16;
    return p;
  }

 private:
  float* data_;
  size_t used_ = 0;
};

struct Dims {
  int T, Tp, hs, hsp;
  size_t ld;   // row stride of qkv: 3C
  size_t ldy;  // row stride of out / dout: C
  float scale;
};

Dims dims_of(int T, int C, int NH, int W) {
  const int hs = C / NH;
  return {T,
          round_up(T, kBlock),
          hs,
          round_up(hs, W),
          static_cast<size_t>(3) * C,
          static_cast<size_t>(C),
          1.0f / std::sqrt(static_cast<float>(hs))};
}

size_t forward_scratch(const Dims& d) {
  const size_t Tp = d.Tp, hsp = d.hsp;
  return 2 * Tp * hsp + d.hs * Tp + kBlock * Tp + kBlock * hsp + 5 * 16;
}

size_t backward_scratch(const Dims& d) {
  const size_t Tp = d.Tp, hsp = d.hsp;
  return 6 * Tp * hsp + 2 * d.hs * Tp + 2 * kBlock * Tp + kBlock * hsp + Tp + 12 * 16;
}

// One (batch, head): q at qkv's head offset (k at + C, v at + 2C), y at out's.
template <int W>
TROUPE_NN_LAYER_INLINE void head_forward(float* y, float* lse, const float* q, const Dims& d,
                                         float* scratch) {
  const int T = d.T, Tp = d.Tp, hs = d.hs, hsp = d.hsp;
  const size_t C = d.ldy;
  float* qp = scratch;                              // [Tp, hsp]
  float* vp = qp + static_cast<size_t>(Tp) * hsp;   // [Tp, hsp]
  float* kt = vp + static_cast<size_t>(Tp) * hsp;   // [hs, Tp]
  float* S = kt + static_cast<size_t>(hs) * Tp;     // [kBlock, Tp]
  float* o = S + static_cast<size_t>(kBlock) * Tp;  // [kBlock, hsp]
  load_rows(qp, hsp, q, d.ld, T, Tp, hs);
  load_rows(vp, hsp, q + 2 * C, d.ld, T, Tp, hs);
  load_transposed(kt, q + C, d.ld, T, Tp, hs);
  const size_t ldS = Tp;
  for (int r0 = 0; r0 < T; r0 += kBlock) {
    const int nc = r0 + kBlock;
    block_scores<W>(S, ldS, qp, hsp, kt, Tp, r0, hs);
    for (int i = 0; i < kBlock; i++) {
      const int t = r0 + i;
      float* row = S + i * ldS;
      if (t >= T) {
        std::memset(row, 0, sizeof(float) * nc);
        continue;
      }
      float maxval = -INFINITY;
#pragma omp simd reduction(max : maxval)
      for (int j = 0; j <= t; j++)
        maxval = row[j] > maxval ? row[j] : maxval;
      float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
      for (int j = 0; j <= t; j++) {
        row[j] = detail::exp_fast(d.scale * (row[j] - maxval));
        sum += row[j];
      }
      const float inv = 1.0f / sum;
#pragma omp simd
      for (int j = 0; j <= t; j++)
        row[j] *= inv;
      for (int j = t + 1; j < nc; j++)
        row[j] = 0.0f;
      lse[t] = d.scale * maxval + std::log(sum);
    }
    block_rows_times<W, false>(o, S, ldS, vp, hsp, r0);
    for (int i = 0; i < kBlock && r0 + i < T; i++)
      std::memcpy(y + (r0 + i) * C, o + i * hsp, sizeof(float) * hs);
  }
}

template <int W>
TROUPE_NN_LAYER_INLINE void head_backward(float* dq, const float* dy, const float* q,
                                          const float* y, const float* lse, const Dims& d,
                                          bool accumulate, float* scratch) {
  const int T = d.T, Tp = d.Tp, hs = d.hs, hsp = d.hsp;
  const size_t C = d.ldy, Tphsp = static_cast<size_t>(Tp) * hsp;
  float* qp = scratch;                                 // [Tp, hsp]
  float* kp = qp + Tphsp;                              // [Tp, hsp]
  float* dyp = kp + Tphsp;                             // [Tp, hsp]
  float* dk = dyp + Tphsp;                             // [Tp, hsp]
  float* dv = dk + Tphsp;                              // [Tp, hsp]
  float* kt = dv + Tphsp;                              // [hs, Tp]
  float* vt = kt + static_cast<size_t>(hs) * Tp;       // [hs, Tp]
  float* P = vt + static_cast<size_t>(hs) * Tp;        // [kBlock, Tp]
  float* dS = P + static_cast<size_t>(kBlock) * Tp;    // [kBlock, Tp]
  float* dqb = dS + static_cast<size_t>(kBlock) * Tp;  // [kBlock, hsp]
  float* D = dqb + static_cast<size_t>(kBlock) * hsp;  // [Tp]
  load_rows(qp, hsp, q, d.ld, T, Tp, hs);
  load_rows(kp, hsp, q + C, d.ld, T, Tp, hs);
  load_rows(dyp, hsp, dy, C, T, Tp, hs);
  load_transposed(kt, q + C, d.ld, T, Tp, hs);
  load_transposed(vt, q + 2 * C, d.ld, T, Tp, hs);
  std::memset(dk, 0, sizeof(float) * 2 * Tphsp);  // dk and dv
  // D[t] = sum over the head's channels of dy * y: the softmax backward's row term.
  for (int t = 0; t < T; t++) {
    const float* a = dy + t * C;
    const float* b = y + t * C;
    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
    for (int c = 0; c < hs; c++)
      dot += a[c] * b[c];
    D[t] = dot;
  }
  const size_t ldS = Tp;
  for (int r0 = 0; r0 < T; r0 += kBlock) {
    const int nc = r0 + kBlock;
    block_scores<W>(P, ldS, qp, hsp, kt, Tp, r0, hs);    // q k^T
    block_scores<W>(dS, ldS, dyp, hsp, vt, Tp, r0, hs);  // datt = dy v^T
    for (int i = 0; i < kBlock; i++) {
      const int t = r0 + i;
      float* p = P + i * ldS;
      float* g = dS + i * ldS;
      int valid = 0;  // columns [0, valid) are on or below the diagonal of a real row
      if (t < T) {
        valid = t + 1;
        const float l = lse[t], Dt = D[t], scale = d.scale;
#pragma omp simd
        for (int j = 0; j < valid; j++) {
          p[j] = detail::exp_fast(scale * p[j] - l);
          g[j] = p[j] * (g[j] - Dt) * scale;  // dpreatt, with the 1/sqrt(hs) of the scores
        }
      }
      for (int j = valid; j < nc; j++) {
        p[j] = 0.0f;
        g[j] = 0.0f;
      }
    }
    block_rows_times<W, false>(dqb, dS, ldS, kp, hsp, r0);  // dq = dpreatt k
    block_columns_times<W>(dk, dS, ldS, qp, hsp, r0);       // dk += dpreatt^T q
    block_columns_times<W>(dv, P, ldS, dyp, hsp, r0);       // dv += att^T dy
    for (int i = 0; i < kBlock && r0 + i < T; i++) {
      float* dst = dq + (r0 + i) * d.ld;
      const float* src = dqb + i * hsp;
      if (accumulate) {
        for (int c = 0; c < hs; c++)
          dst[c] += src[c];
      } else {
        std::memcpy(dst, src, sizeof(float) * hs);
      }
    }
  }
  for (int t = 0; t < T; t++) {
    float* dkt = dq + t * d.ld + C;
    float* dvt = dkt + C;
    const float* a = dk + t * hsp;
    const float* b = dv + t * hsp;
    if (accumulate) {
      for (int c = 0; c < hs; c++) {
        dkt[c] += a[c];
        dvt[c] += b[c];
      }
    } else {
      std::memcpy(dkt, a, sizeof(float) * hs);
      std::memcpy(dvt, b, sizeof(float) * hs);
    }
  }
}

__attribute__((
    target("avx512f,avx512vl,avx512bw,avx512dq,avx2,fma,f16c,bmi,bmi2,"
           "prefer-vector-width=512"))) void
head_forward_avx512(float* y, float* lse, const float* q, const Dims& d, float* scratch) {
  head_forward<16>(y, lse, q, d, scratch);
}

__attribute__((
    target("avx512f,avx512vl,avx512bw,avx512dq,avx2,fma,f16c,bmi,bmi2,"
           "prefer-vector-width=512"))) void
head_backward_avx512(float* dq, const float* dy, const float* q, const float* y, const float* lse,
                     const Dims& d, bool accumulate, float* scratch) {
  head_backward<16>(dq, dy, q, y, lse, d, accumulate, scratch);
}

TROUPE_NN_LAYER_CLONES void head_forward_generic(float* y, float* lse, const float* q,
                                                 const Dims& d, float* scratch) {
  head_forward<8>(y, lse, q, d, scratch);
}

TROUPE_NN_LAYER_CLONES void head_backward_generic(float* dq, const float* dy, const float* q,
                                                  const float* y, const float* lse, const Dims& d,
                                                  bool accumulate, float* scratch) {
  head_backward<8>(dq, dy, q, y, lse, d, accumulate, scratch);
}

// TROUPE_NN_NO_AVX512 (non-empty) selects the 8-wide kernels on any CPU (read at every call, so
// that a test can run both).
bool use_avx512() {
#if defined(__x86_64__)
  static const bool cpu_has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("fma");
  }();
  const char* off = std::getenv("TROUPE_NN_NO_AVX512");
  return cpu_has && (off == nullptr || *off == '\0');
#else
  return false;
#endif
}

}  // namespace

void flash_attention_forward(float* out, float* lse, const float* inp, int B, int T, int C,
                             int NH) {
  const bool wide = use_avx512();
  const Dims d = dims_of(T, C, NH, wide ? 16 : 8);
#pragma omp parallel num_threads(num_threads())
  {
    Scratch scratch(forward_scratch(d));
    float* s = scratch.take(forward_scratch(d));
#pragma omp for collapse(2) schedule(static)
    for (int b = 0; b < B; b++) {
      for (int h = 0; h < NH; h++) {
        const size_t bt = static_cast<size_t>(b) * T;
        float* y = out + bt * C + h * d.hs;
        float* l = lse + (static_cast<size_t>(b) * NH + h) * T;
        const float* q = inp + bt * 3 * C + h * d.hs;
        if (wide) {
          head_forward_avx512(y, l, q, d, s);
        } else {
          head_forward_generic(y, l, q, d, s);
        }
      }
    }
  }
}

void flash_attention_backward(float* dinp, const float* dout, const float* inp, const float* out,
                              const float* lse, int B, int T, int C, int NH, bool accumulate) {
  const bool wide = use_avx512();
  const Dims d = dims_of(T, C, NH, wide ? 16 : 8);
#pragma omp parallel num_threads(num_threads())
  {
    Scratch scratch(backward_scratch(d));
    float* s = scratch.take(backward_scratch(d));
#pragma omp for collapse(2) schedule(static)
    for (int b = 0; b < B; b++) {
      for (int h = 0; h < NH; h++) {
        const size_t bt = static_cast<size_t>(b) * T;
        const size_t head = bt * 3 * C + h * d.hs;
        const size_t yoff = bt * C + h * d.hs;
        const float* l = lse + (static_cast<size_t>(b) * NH + h) * T;
        if (wide) {
          head_backward_avx512(dinp + head, dout + yoff, inp + head, out + yoff, l, d, accumulate,
                               s);
        } else {
          head_backward_generic(dinp + head, dout + yoff, inp + head, out + yoff, l, d, accumulate,
                                s);
        }
      }
    }
  }
}

}  // namespace troupe::nn
