#include "nn/layers/decode.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <vector>

#include "nn/layers/detail/clones.h"
#include "nn/layers/detail/exp.h"
#include "nn/layers/linear.h"
#include "nn/threads.h"

namespace troupe::nn {
namespace {

// out[0:hd) = softmax over s <= last of (q . k[s] * scale) times v[s]; scores holds last + 1
// floats of scratch.
TROUPE_NN_LAYER_CLONES void attend(float* out, const float* q, const float* k, const float* v,
                                   int last, int hd, float scale, float* scores) {
  float max = -INFINITY;
  for (int s = 0; s <= last; s++) {
    const float* ks = k + static_cast<size_t>(s) * hd;
    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
    for (int i = 0; i < hd; i++)
      dot += q[i] * ks[i];
    scores[s] = dot * scale;
    max = std::max(max, scores[s]);
  }
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int s = 0; s <= last; s++) {
    scores[s] = detail::exp_fast(scores[s] - max);
    sum += scores[s];
  }
  std::fill(out, out + hd, 0.0f);
  for (int s = 0; s <= last; s++) {
    const float* vs = v + static_cast<size_t>(s) * hd;
    const float p = scores[s];
#pragma omp simd
    for (int i = 0; i < hd; i++)
      out[i] += p * vs[i];
  }
  const float inv = 1.0f / sum;
#pragma omp simd
  for (int i = 0; i < hd; i++)
    out[i] *= inv;
}

// out[r, o] = inp[r, :] . weight[o, :] (+ bias[o]) for r < n, o in [o0, o1).
TROUPE_NN_LAYER_CLONES void dot_rows(float* out, const float* inp, const float* weight,
                                     const float* bias, int n, int C, int OC, int o0, int o1) {
  for (int o = o0; o < o1; o++) {
    const float* w = weight + static_cast<size_t>(o) * C;
    for (int r = 0; r < n; r++) {
      const float* x = inp + static_cast<size_t>(r) * C;
      float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
      for (int c = 0; c < C; c++)
        dot += x[c] * w[c];
      out[static_cast<size_t>(r) * OC + o] = bias != nullptr ? dot + bias[o] : dot;
    }
  }
}

}  // namespace

void decode_attention_forward(float* out, const float* q, int ldq, const float* k, const float* v,
                              int B, int T, int p0, int NH, int KV, int hd, int cap) {
  const int group = NH / KV;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const int n = B * T * NH;
#pragma omp parallel num_threads(std::min(num_threads(), n))
  {
    std::vector<float> scores(static_cast<size_t>(p0 + T));
#pragma omp for schedule(static)
    for (int i = 0; i < n; i++) {
      const int h = i % NH, t = (i / NH) % T, b = i / (NH * T);
      const size_t row = static_cast<size_t>(b) * T + t;
      const size_t head = (static_cast<size_t>(b) * KV + h / group) * cap * hd;
      attend(out + row * NH * hd + static_cast<size_t>(h) * hd,
             q + row * ldq + static_cast<size_t>(h) * hd, k + head, v + head, p0 + t, hd, scale,
             scores.data());
    }
  }
}

void decode_linear_forward(float* out, const float* inp, const float* weight, const float* bias,
                           int n, int C, int OC) {
  if (n > kFewRows) {
    linear_forward(out, inp, weight, bias, 1, n, C, OC);
    return;
  }
  // Chunks of 64 output channels: whole cache lines of out for every thread.
  constexpr int kChunk = 64;
  const int chunks = (OC + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) num_threads(std::min(num_threads(), chunks))
  for (int c = 0; c < chunks; c++) {
    dot_rows(out, inp, weight, bias, n, C, OC, c * kChunk, std::min(OC, (c + 1) * kChunk));
  }
}

void decode_cache_write(float* cache, const float* src, int ld, int head_stride, int B, int T,
                        int p0, int heads, int hd, int cap) {
  for (int b = 0; b < B; b++) {
    for (int t = 0; t < T; t++) {
      const float* s = src + (static_cast<size_t>(b) * T + t) * ld;
      for (int h = 0; h < heads; h++) {
        float* dst = cache + ((static_cast<size_t>(b) * heads + h) * cap + p0 + t) * hd;
        std::memcpy(dst, s + static_cast<size_t>(h) * head_stride, sizeof(float) * hd);
      }
    }
  }
}

}  // namespace troupe::nn
