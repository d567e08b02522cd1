#include "nn/layers/linear.h"

#include <omp.h>

#include <cstring>

#include "nn/gemm.h"
#include "nn/layers/detail/partition.h"
#include "nn/threads.h"

namespace troupe::nn {
namespace {

// With OpenBLAS's OpenMP build the layer splits each product across its threads itself: thread i
// of n computes rows [i/n, (i+1)/n) of the output (of out and dinp: positions; of dweight: output
// channels) with a GEMM on its own thread. Each thread packs its operands and runs without
// waiting for the others (OpenBLAS's own threading synchronises inside every product), and the
// backward's two products share one parallel region. Every output element sums its K terms
// in the order of a one-thread GEMM of its chunk: the same bits for a fixed thread count.
bool split_here() {
  return num_threads() > 1 && gemm_runs_on_caller_in_parallel();
}

}  // namespace

void linear_forward(float* out, const float* inp, const float* weight, const float* bias, int B,
                    int T, int C, int OC) {
  const int BT = B * T;
  if (split_here()) {
#pragma omp parallel num_threads(num_threads())
    {
      const detail::Chunk rows =
          detail::chunk_of(BT, omp_get_thread_num(), omp_get_num_threads(), 4);
      const int n = static_cast<int>(rows.end - rows.begin);
      float* o = out + rows.begin * OC;
      if (bias != nullptr) {
        for (int row = 0; row < n; row++)
          std::memcpy(o + static_cast<size_t>(row) * OC, bias, sizeof(float) * OC);
      }
      if (n > 0) {
        gemm(false, true, n, OC, C, 1.0f, inp + rows.begin * C, C, weight, C,
             bias != nullptr ? 1.0f : 0.0f, o, OC);
      }
    }
    return;
  }
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
                     const float* weight, int B, int T, int C, int OC, bool accumulate_dinp) {
  const int BT = B * T;
  const float dinp_beta = accumulate_dinp ? 1.0f : 0.0f;
  const bool split = split_here();
  if (!split) {
    if (dinp != nullptr)
      gemm(false, false, BT, C, OC, 1.0f, dout, OC, weight, C, dinp_beta, dinp, C);
    gemm(true, false, OC, C, BT, 1.0f, dout, OC, inp, C, 1.0f, dweight, C);
    if (dbias == nullptr) return;
  }
  // Each thread owns a slice of the output channels; dbias adds every row into it, in row order:
  // the same bits for any thread count.
#pragma omp parallel num_threads(num_threads())
  {
    const int tid = omp_get_thread_num(), nth = omp_get_num_threads();
    const detail::Chunk ch = detail::chunk_of(OC, tid, nth);
    if (split) {
      const detail::Chunk rows = detail::chunk_of(BT, tid, nth, 4);
      if (dinp != nullptr && rows.end > rows.begin) {
        gemm(false, false, static_cast<int>(rows.end - rows.begin), C, OC, 1.0f,
             dout + rows.begin * OC, OC, weight, C, dinp_beta, dinp + rows.begin * C, C);
      }
      if (ch.end > ch.begin) {
        gemm(true, false, static_cast<int>(ch.end - ch.begin), C, BT, 1.0f, dout + ch.begin, OC,
             inp, C, 1.0f, dweight + ch.begin * C, C);
      }
    }
    if (dbias != nullptr) {
      for (int row = 0; row < BT; row++) {
        const float* g = dout + static_cast<size_t>(row) * OC;
        for (int64_t o = ch.begin; o < ch.end; o++)
          dbias[o] += g[o];
      }
    }
  }
}

}  // namespace troupe::nn
