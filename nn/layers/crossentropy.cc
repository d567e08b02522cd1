#include "nn/layers/crossentropy.h"

#include <cmath>
#include <vector>

#include "nn/layers/detail/clones.h"
#include "nn/layers/detail/exp.h"
#include "nn/layers/detail/softmax_row.h"
#include "nn/threads.h"

namespace troupe::nn {
namespace {

TROUPE_NN_LAYER_CLONES float row_lse(const float* x, int V) {
  const float m = detail::row_max(x, V);
  return m + std::log(detail::row_sum_exp(x, V, m));
}

TROUPE_NN_LAYER_CLONES void row_backward(float* dx, const float* x, int V, float lse, float scale) {
  detail::row_add_softmax(dx, x, V, lse, scale);
}

TROUPE_NN_LAYER_CLONES void row_backward_write(float* dx, const float* x, int V, int Vp, float lse,
                                               float scale) {
#pragma omp simd
  for (int i = 0; i < V; i++)
    dx[i] = scale * detail::exp_fast(x[i] - lse);
  for (int i = V; i < Vp; i++)
    dx[i] = 0.0f;
}

TROUPE_NN_LAYER_CLONES void row_softmax(float* p, const float* x, int V, int Vp) {
  const float m = detail::row_max(x, V);
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int i = 0; i < V; i++) {
    p[i] = detail::exp_fast(x[i] - m);
    sum += p[i];
  }
  const float inv = 1.0f / sum;
  for (int i = 0; i < V; i++)
    p[i] *= inv;
  for (int i = V; i < Vp; i++)
    p[i] = 0.0f;
}

}  // namespace

float crossentropy_forward(float* losses, float* lse, const float* logits, const int32_t* targets,
                           int B, int T, int V, int Vp) {
  const int BT = B * T;
  std::vector<float> own;
  if (losses == nullptr) {
    own.resize(BT);
    losses = own.data();
  }
#pragma omp parallel for schedule(static) num_threads(num_threads())
  for (int row = 0; row < BT; row++) {
    const float* x = logits + static_cast<size_t>(row) * Vp;
    lse[row] = row_lse(x, V);
    losses[row] = lse[row] - x[targets[row]];
  }
  // The mean in row order, in double: independent of the thread count.
  double sum = 0.0;
  for (int row = 0; row < BT; row++)
    sum += losses[row];
  return static_cast<float>(sum / BT);
}

void crossentropy_backward(float* dlogits, float dloss, const float* logits, const float* lse,
                           const int32_t* targets, int B, int T, int V, int Vp, bool accumulate) {
  const int BT = B * T;
  const float scale = dloss / static_cast<float>(BT);
#pragma omp parallel for schedule(static) num_threads(num_threads())
  for (int row = 0; row < BT; row++) {
    const size_t off = static_cast<size_t>(row) * Vp;
    if (accumulate) {
      row_backward(dlogits + off, logits + off, V, lse[row], scale);
    } else {
      row_backward_write(dlogits + off, logits + off, V, Vp, lse[row], scale);
    }
    dlogits[off + targets[row]] -= scale;
  }
}

void softmax_forward(float* probs, const float* logits, int B, int T, int V, int Vp) {
  const int BT = B * T;
#pragma omp parallel for schedule(static) num_threads(num_threads())
  for (int row = 0; row < BT; row++) {
    const size_t off = static_cast<size_t>(row) * Vp;
    row_softmax(probs + off, logits + off, V, Vp);
  }
}

}  // namespace troupe::nn
