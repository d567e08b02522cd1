#include "nn/layers/linear.h"

#include <omp.h>

#include <cstring>

#include "nn/gemm.h"
#include "nn/layers/detail/partition.h"
#include "nn/threads.h"

namespace troupe::nn {

void linear_forward(float* out, const float* inp, const float* weight, const float* bias, int B,
                    int T, int C, int OC) {
  const int BT = B * T;
  float beta = 0.0f;
  if (bias != nullptr) {
    // Start each row at the bias and let the GEMM add to it: one pass over out, not two.
#pragma omp parallel for schedule(static) num_threads(num_threads())
    for (int row = 0; row < BT; row++) {
      std::memcpy(out + static_cast<size_t>(row) * OC, bias, sizeof(float) * OC);
    }
    beta = 1.0f;
  }
  gemm(false, true, BT, OC, C, 1.0f, inp, C, weight, C, beta, out, OC);
}

void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int B, int T, int C, int OC) {
  const int BT = B * T;
  if (dinp != nullptr) gemm(false, false, BT, C, OC, 1.0f, dout, OC, weight, C, 1.0f, dinp, C);
  gemm(true, false, OC, C, BT, 1.0f, dout, OC, inp, C, 1.0f, dweight, C);
  if (dbias == nullptr) return;
    // Each thread owns a slice of the output channels and adds every row into it, in row order:
    // the same bits for any thread count.
#pragma omp parallel num_threads(num_threads())
  {
    const detail::Chunk ch = detail::chunk_of(OC, omp_get_thread_num(), omp_get_num_threads());
    for (int row = 0; row < BT; row++) {
      const float* g = dout + static_cast<size_t>(row) * OC;
      for (int64_t o = ch.begin; o < ch.end; o++)
        dbias[o] += g[o];
    }
  }
}

}  // namespace troupe::nn
