#include "nn/layers/rmsnorm.h"

#include <omp.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "nn/layers/detail/clones.h"
#include "nn/threads.h"

namespace troupe::nn {
namespace {

// One position: y = (x * rstd) * weight over C channels.
TROUPE_NN_LAYER_CLONES void row_forward(float* y, float* rstd, const float* x, const float* weight,
                                        int C, float eps) {
  float sq = 0.0f;
#pragma omp simd reduction(+ : sq)
  for (int i = 0; i < C; i++)
    sq += x[i] * x[i];
  const float s = 1.0f / std::sqrt(sq / C + eps);
  for (int i = 0; i < C; i++)
    y[i] = weight[i] * (x[i] * s);
  *rstd = s;
}

// One position: dx (+)= ..., and this thread's partial sums pw += norm * g.
// With norm = x * rstd and dnorm = weight * g: dx = rstd * (dnorm - norm * mean(dnorm * norm)).
template <bool kAccumulate>
TROUPE_NN_LAYER_INLINE void row_backward(float* dx, float* pw, const float* g, const float* x,
                                         const float* weight, float s, int C) {
  float dnorm_norm_mean = 0.0f;
#pragma omp simd reduction(+ : dnorm_norm_mean)
  for (int i = 0; i < C; i++)
    dnorm_norm_mean += weight[i] * g[i] * (x[i] * s);
  dnorm_norm_mean /= C;
#pragma omp simd
  for (int i = 0; i < C; i++) {
    const float norm = x[i] * s;
    const float d = (weight[i] * g[i] - norm * dnorm_norm_mean) * s;
    dx[i] = kAccumulate ? dx[i] + d : d;
    pw[i] += norm * g[i];
  }
}

// Rows [begin, end) of the backward.
TROUPE_NN_LAYER_CLONES void rows_backward(float* dinp, float* pw, const float* dout,
                                          const float* inp, const float* weight, const float* rstd,
                                          int begin, int end, int C, bool accumulate) {
  for (int row = begin; row < end; row++) {
    const size_t off = static_cast<size_t>(row) * C;
    if (accumulate) {
      row_backward<true>(dinp + off, pw, dout + off, inp + off, weight, rstd[row], C);
    } else {
      row_backward<false>(dinp + off, pw, dout + off, inp + off, weight, rstd[row], C);
    }
  }
}

}  // namespace

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int B, int T,
                     int C, float eps) {
  const int BT = B * T;
#pragma omp parallel for schedule(static) num_threads(num_threads())
  for (int row = 0; row < BT; row++) {
    const size_t off = static_cast<size_t>(row) * C;
    row_forward(out + off, rstd + row, inp + off, weight, C, eps);
  }
}

void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                      const float* weight, const float* rstd, int B, int T, int C,
                      bool accumulate_dinp) {
  const int BT = B * T;
  const int threads = num_threads();
  // Each thread sums dweight over its static block of rows into its own slot; the slots are then
  // added in thread order. Same thread count, same bits.
  std::vector<float> partial(static_cast<size_t>(threads) * C, 0.0f);
#pragma omp parallel num_threads(threads)
  {
    const int nth = omp_get_num_threads(), tid = omp_get_thread_num();
    const int begin = static_cast<int>(static_cast<int64_t>(BT) * tid / nth);
    const int end = static_cast<int>(static_cast<int64_t>(BT) * (tid + 1) / nth);
    rows_backward(dinp, partial.data() + static_cast<size_t>(tid) * C, dout, inp, weight, rstd,
                  begin, end, C, accumulate_dinp);
#pragma omp barrier
#pragma omp for schedule(static)
    for (int i = 0; i < C; i++) {
      float w = 0.0f;
      for (int th = 0; th < nth; th++)
        w += partial[static_cast<size_t>(th) * C + i];
      dweight[i] += w;
    }
  }
}

}  // namespace troupe::nn
