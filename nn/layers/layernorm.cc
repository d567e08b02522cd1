#include "nn/layers/layernorm.h"

#include <omp.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "nn/layers/detail/clones.h"
#include "nn/threads.h"

namespace troupe::nn {
namespace {

// One position: y = (x - mean) * rstd * weight + bias over C channels.
TROUPE_NN_LAYER_CLONES void row_forward(float* y, float* mean, float* rstd, const float* x,
                                        const float* weight, const float* bias, int C) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int i = 0; i < C; i++)
    sum += x[i];
  const float m = sum / C;
  // Two passes: the variance of the centred values does not cancel catastrophically.
  float sq = 0.0f;
#pragma omp simd reduction(+ : sq)
  for (int i = 0; i < C; i++)
    sq += (x[i] - m) * (x[i] - m);
  const float s = 1.0f / std::sqrt(sq / C + kLayerNormEps);
  for (int i = 0; i < C; i++)
    y[i] = (x[i] - m) * s * weight[i] + bias[i];
  *mean = m;
  *rstd = s;
}

// One position: dx (+)= ..., and this thread's partial sums pw += norm * g, pb += g.
// With dnorm = weight * g: dx = rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)).
template <bool kAccumulate>
TROUPE_NN_LAYER_INLINE void row_backward(float* dx, float* pw, float* pb, const float* g,
                                         const float* x, const float* weight, float m, float s,
                                         int C) {
  float dnorm_mean = 0.0f;
  float dnorm_norm_mean = 0.0f;
#pragma omp simd reduction(+ : dnorm_mean, dnorm_norm_mean)
  for (int i = 0; i < C; i++) {
    const float norm = (x[i] - m) * s;
    const float dnorm = weight[i] * g[i];
    dnorm_mean += dnorm;
    dnorm_norm_mean += dnorm * norm;
  }
  dnorm_mean /= C;
  dnorm_norm_mean /= C;
#pragma omp simd
  for (int i = 0; i < C; i++) {
    const float norm = (x[i] - m) * s;
    const float dnorm = weight[i] * g[i];
    const float d = (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
    dx[i] = kAccumulate ? dx[i] + d : d;
    pw[i] += norm * g[i];
    pb[i] += g[i];
  }
}

// Rows [begin, end) of the backward.
TROUPE_NN_LAYER_CLONES void rows_backward(float* dinp, float* pw, float* pb, const float* dout,
                                          const float* inp, const float* weight, const float* mean,
                                          const float* rstd, int begin, int end, int C,
                                          bool accumulate) {
  for (int row = begin; row < end; row++) {
    const size_t off = static_cast<size_t>(row) * C;
    if (accumulate) {
      row_backward<true>(dinp + off, pw, pb, dout + off, inp + off, weight, mean[row], rstd[row],
                         C);
    } else {
      row_backward<false>(dinp + off, pw, pb, dout + off, inp + off, weight, mean[row], rstd[row],
                          C);
    }
  }
}

}  // namespace

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int B, int T, int C) {
  const int BT = B * T;
#pragma omp parallel for schedule(static) num_threads(num_threads())
  for (int row = 0; row < BT; row++) {
    const size_t off = static_cast<size_t>(row) * C;
    row_forward(out + off, mean + row, rstd + row, inp + off, weight, bias, C);
  }
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        int B, int T, int C, bool accumulate_dinp) {
  const int BT = B * T;
  const int threads = num_threads();
  // Each thread sums dweight and dbias over its static block of rows into its own slot; the slots
  // are then added in thread order. Same thread count, same bits.
  std::vector<float> partial(static_cast<size_t>(threads) * 2 * C, 0.0f);
#pragma omp parallel num_threads(threads)
  {
    const int nth = omp_get_num_threads();
    float* pw = partial.data() + static_cast<size_t>(omp_get_thread_num()) * 2 * C;
    {
      // The rows of a static schedule, in one call (one dispatch through the clones).
      const int tid = omp_get_thread_num();
      const int begin = static_cast<int>(static_cast<int64_t>(BT) * tid / nth);
      const int end = static_cast<int>(static_cast<int64_t>(BT) * (tid + 1) / nth);
      rows_backward(dinp, pw, pw + C, dout, inp, weight, mean, rstd, begin, end, C,
                    accumulate_dinp);
    }
#pragma omp barrier
#pragma omp for schedule(static)
    for (int i = 0; i < C; i++) {
      float w = 0.0f;
      float b = 0.0f;
      for (int th = 0; th < nth; th++) {
        w += partial[static_cast<size_t>(th) * 2 * C + i];
        b += partial[static_cast<size_t>(th) * 2 * C + C + i];
      }
      dweight[i] += w;
      dbias[i] += b;
    }
  }
}

}  // namespace troupe::nn
