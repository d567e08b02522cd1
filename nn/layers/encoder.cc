#include "nn/layers/encoder.h"

#include <omp.h>

#include "nn/layers/detail/embedding.h"
#include "nn/layers/detail/partition.h"
#include "nn/threads.h"

namespace troupe::nn {

void encoder_forward(float* out, const int32_t* inp, const float* wte, const float* wpe, int B,
                     int T, int C) {
#pragma omp parallel for collapse(2) schedule(static) num_threads(num_threads())
  for (int b = 0; b < B; b++) {
    for (int t = 0; t < T; t++) {
      const size_t row = static_cast<size_t>(b) * T + t;
      float* out_bt = out + row * C;
      const float* wte_ix = wte + static_cast<size_t>(inp[row]) * C;
      const float* wpe_t = wpe + static_cast<size_t>(t) * C;
      for (int i = 0; i < C; i++)
        out_bt[i] = wte_ix[i] + wpe_t[i];
    }
  }
}

void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* inp, int B, int T,
                      int C) {
  detail::embedding_rows_backward(dwte, dout, inp, static_cast<size_t>(B) * T, 0, INT32_MAX, C);
  detail::position_backward(dwpe, dout, B, T, C);
}

namespace detail {

void embedding_rows_backward(float* dtable, const float* dout, const int32_t* ids, size_t n, int v0,
                             int v1, int C) {
  // A token may repeat, so rows of dtable cannot be split across threads; channels can.
#pragma omp parallel num_threads(num_threads())
  {
    const Chunk ch = chunk_of(C, omp_get_thread_num(), omp_get_num_threads());
    for (size_t row = 0; row < n; row++) {
      const int ix = ids[row];
      if (ix < v0 || ix >= v1) continue;
      float* d = dtable + static_cast<size_t>(ix - v0) * C;
      const float* g = dout + row * C;
      for (int64_t i = ch.begin; i < ch.end; i++)
        d[i] += g[i];
    }
  }
}

void position_backward(float* dwpe, const float* dout, int B, int T, int C) {
#pragma omp parallel for schedule(static) num_threads(num_threads())
  for (int t = 0; t < T; t++) {
    float* d = dwpe + static_cast<size_t>(t) * C;
    for (int b = 0; b < B; b++) {
      const float* g = dout + (static_cast<size_t>(b) * T + t) * C;
      for (int i = 0; i < C; i++)
        d[i] += g[i];
    }
  }
}

}  // namespace detail
}  // namespace troupe::nn
