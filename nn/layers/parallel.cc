#include "nn/layers/parallel.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "nn/gemm.h"
#include "nn/kernels.h"
#include "nn/layers/detail/clones.h"
#include "nn/layers/detail/embedding.h"
#include "nn/layers/detail/softmax_row.h"
#include "nn/layers/linear.h"
#include "nn/threads.h"

namespace troupe::nn {

void column_parallel_linear_forward(float* out_shard, const float* inp, const float* weight_shard,
                                    const float* bias_shard, int B, int T, int C, int OCl) {
  linear_forward(out_shard, inp, weight_shard, bias_shard, B, T, C, OCl);
}

absl::Status column_parallel_linear_backward(float* dinp, float* dinp_partial, float* dweight_shard,
                                             float* dbias_shard, const float* dout_shard,
                                             const float* inp, const float* weight_shard, int B,
                                             int T, int C, int OCl,
                                             const AllReduceFn& allreduce_sum) {
  linear_backward(nullptr, dweight_shard, dbias_shard, dout_shard, inp, weight_shard, B, T, C, OCl);
  if (dinp == nullptr) return absl::OkStatus();
  // The partial must be reduced alone: dinp may already hold replicated gradient (the residual
  // stream) that a sum across ranks would count tp times.
  const size_t n = static_cast<size_t>(B) * T * C;
  gemm(false, false, B * T, C, OCl, 1.0f, dout_shard, OCl, weight_shard, C, 0.0f, dinp_partial, C);
  if (absl::Status s = allreduce_sum(dinp_partial, n); !s.ok()) return s;
  add(dinp, dinp, dinp_partial, static_cast<int64_t>(n));
  return absl::OkStatus();
}

absl::Status row_parallel_linear_forward(float* out, const float* inp_shard,
                                         const float* weight_shard, const float* bias, int B, int T,
                                         int Cl, int OC, const AllReduceFn& allreduce_sum) {
  const int BT = B * T;
  linear_forward(out, inp_shard, weight_shard, nullptr, B, T, Cl, OC);
  if (absl::Status s = allreduce_sum(out, static_cast<size_t>(BT) * OC); !s.ok()) return s;
  // The bias after the sum, or it would be added tp times.
  if (bias == nullptr) return absl::OkStatus();
#pragma omp parallel for schedule(static) num_threads(num_threads())
  for (int row = 0; row < BT; row++) {
    float* o = out + static_cast<size_t>(row) * OC;
    for (int i = 0; i < OC; i++)
      o[i] += bias[i];
  }
  return absl::OkStatus();
}

void row_parallel_linear_backward(float* dinp_shard, float* dweight_shard, float* dbias,
                                  const float* dout, const float* inp_shard,
                                  const float* weight_shard, int B, int T, int Cl, int OC) {
  linear_backward(dinp_shard, dweight_shard, dbias, dout, inp_shard, weight_shard, B, T, Cl, OC);
}

absl::Status vocab_parallel_embedding_forward(float* out, const int32_t* inp,
                                              const float* wte_shard, const float* wpe, int v0,
                                              int v1, int B, int T, int C,
                                              const AllReduceFn& allreduce_sum) {
  const int BT = B * T;
#pragma omp parallel for schedule(static) num_threads(num_threads())
  for (int row = 0; row < BT; row++) {
    float* o = out + static_cast<size_t>(row) * C;
    const int ix = inp[row];
    if (ix >= v0 && ix < v1) {
      std::memcpy(o, wte_shard + static_cast<size_t>(ix - v0) * C, sizeof(float) * C);
    } else {
      std::memset(o, 0, sizeof(float) * C);
    }
  }
  if (absl::Status s = allreduce_sum(out, static_cast<size_t>(BT) * C); !s.ok()) return s;
  if (wpe == nullptr) return absl::OkStatus();
#pragma omp parallel for schedule(static) num_threads(num_threads())
  for (int row = 0; row < BT; row++) {
    float* o = out + static_cast<size_t>(row) * C;
    const float* p = wpe + static_cast<size_t>(row % T) * C;
    for (int i = 0; i < C; i++)
      o[i] += p[i];
  }
  return absl::OkStatus();
}

void vocab_parallel_embedding_backward(float* dwte_shard, float* dwpe, const float* dout,
                                       const int32_t* inp, int v0, int v1, int B, int T, int C) {
  detail::embedding_rows_backward(dwte_shard, dout, inp, static_cast<size_t>(B) * T, v0, v1, C);
  if (dwpe != nullptr) detail::position_backward(dwpe, dout, B, T, C);
}

namespace {

// Columns of the shard [v0, v0 + Vl) that are real vocabulary (< V); the rest is padding.
int real_columns(int v0, int Vl, int V) {
  return std::clamp(V - v0, 0, Vl);
}

TROUPE_NN_LAYER_CLONES float row_max(const float* x, int n) {
  return detail::row_max(x, n);
}
TROUPE_NN_LAYER_CLONES float row_sum_exp(const float* x, int n, float shift) {
  return detail::row_sum_exp(x, n, shift);
}
TROUPE_NN_LAYER_CLONES void row_add_softmax(float* dx, const float* x, int n, float lse,
                                            float scale) {
  detail::row_add_softmax(dx, x, n, lse, scale);
}

}  // namespace

absl::StatusOr<float> vocab_parallel_crossentropy_forward(
    float* losses, float* lse, const float* logits_shard, const int32_t* targets, int v0, int Vl,
    int V, int B, int T, const AllReduceFn& allreduce_max, const AllReduceFn& allreduce_sum) {
  const int BT = B * T;
  const int n = real_columns(v0, Vl, V);
  // lse holds the row max until the end; sums holds sum-exp [0, BT) and target logit [BT, 2BT).
  float* maxes = lse;
#pragma omp parallel for schedule(static) num_threads(num_threads())
  for (int row = 0; row < BT; row++) {
    maxes[row] = row_max(logits_shard + static_cast<size_t>(row) * Vl, n);
  }
  if (absl::Status s = allreduce_max(maxes, BT); !s.ok()) return s;
  std::vector<float> sums(static_cast<size_t>(2) * BT);
#pragma omp parallel for schedule(static) num_threads(num_threads())
  for (int row = 0; row < BT; row++) {
    const float* x = logits_shard + static_cast<size_t>(row) * Vl;
    sums[row] = row_sum_exp(x, n, maxes[row]);
    const int local = targets[row] - v0;
    sums[BT + row] = (local >= 0 && local < n) ? x[local] : 0.0f;
  }
  if (absl::Status s = allreduce_sum(sums.data(), sums.size()); !s.ok()) return s;
  double total = 0.0;
  for (int row = 0; row < BT; row++) {
    lse[row] = maxes[row] + std::log(sums[row]);
    const float loss = lse[row] - sums[BT + row];
    if (losses != nullptr) losses[row] = loss;
    total += loss;
  }
  return static_cast<float>(total / BT);
}

void vocab_parallel_crossentropy_backward(float* dlogits_shard, float dloss,
                                          const float* logits_shard, const float* lse,
                                          const int32_t* targets, int v0, int Vl, int V, int B,
                                          int T) {
  const int BT = B * T;
  const int n = real_columns(v0, Vl, V);
  const float scale = dloss / static_cast<float>(BT);
#pragma omp parallel for schedule(static) num_threads(num_threads())
  for (int row = 0; row < BT; row++) {
    const size_t off = static_cast<size_t>(row) * Vl;
    row_add_softmax(dlogits_shard + off, logits_shard + off, n, lse[row], scale);
    const int local = targets[row] - v0;
    if (local >= 0 && local < n) dlogits_shard[off + local] -= scale;
  }
}

}  // namespace troupe::nn
