#include "nn/layers/rope.h"

#include <cmath>
#include <cstddef>
#include <cstring>
#include <vector>

#include "nn/threads.h"

namespace troupe::nn {
namespace {

// y = x * cos + rotate_half(x) * sin over one head of hd = 2 h values.
inline void rotate(float* y, const float* x, const float* cos, const float* sin, int h) {
  for (int i = 0; i < h; i++) {
    const float x1 = x[i], x2 = x[i + h];
    y[i] = x1 * cos[i] + (-x2) * sin[i];
    y[i + h] = x2 * cos[i] + x1 * sin[i];
  }
}

// The transpose of rotate: dx (=) from dy.
inline void rotate_back(float* dx, const float* dy, const float* cos, const float* sin, int h) {
  for (int i = 0; i < h; i++) {
    const float d1 = dy[i], d2 = dy[i + h];
    dx[i] = d1 * cos[i] + d2 * sin[i];
    dx[i + h] = d2 * cos[i] - d1 * sin[i];
  }
}

}  // namespace

void rope_table(float* cos, float* sin, int maxT, int hd, double theta) {
  const int h = hd / 2;
  std::vector<float> inv_freq(static_cast<size_t>(h));
  for (int i = 0; i < h; i++) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(hd);
    inv_freq[static_cast<size_t>(i)] =
        1.0f / static_cast<float>(std::pow(static_cast<float>(theta), exponent));
  }
  for (int t = 0; t < maxT; t++) {
    for (int i = 0; i < h; i++) {
      const float angle = static_cast<float>(t) * inv_freq[static_cast<size_t>(i)];
      cos[static_cast<size_t>(t) * h + i] =
          static_cast<float>(std::cos(static_cast<double>(angle)));
      sin[static_cast<size_t>(t) * h + i] =
          static_cast<float>(std::sin(static_cast<double>(angle)));
    }
  }
}

void rope_qkv_forward(float* out, const float* qkv, const float* cos, const float* sin, int B,
                      int T, int NH, int KV, int hd) {
  const int BT = B * T, h = hd / 2, group = NH / KV;
  const size_t C = static_cast<size_t>(NH) * hd, ld = (static_cast<size_t>(NH) + 2 * KV) * hd;
  const size_t kv_size = static_cast<size_t>(KV) * hd;
#pragma omp parallel for schedule(static) num_threads(num_threads())
  for (int row = 0; row < BT; row++) {
    const float* c = cos + static_cast<size_t>(row % T) * h;
    const float* s = sin + static_cast<size_t>(row % T) * h;
    const float* q = qkv + row * ld;
    const float* k = q + C;
    const float* v = k + kv_size;
    float* o = out + row * 3 * C;
    for (int head = 0; head < NH; head++) {
      const size_t kv_head = static_cast<size_t>(head / group) * hd;
      rotate(o + static_cast<size_t>(head) * hd, q + static_cast<size_t>(head) * hd, c, s, h);
      rotate(o + C + static_cast<size_t>(head) * hd, k + kv_head, c, s, h);
      std::memcpy(o + 2 * C + static_cast<size_t>(head) * hd, v + kv_head, sizeof(float) * hd);
    }
  }
}

void rope_qkv_backward(float* dqkv, const float* dout, const float* cos, const float* sin, int B,
                       int T, int NH, int KV, int hd) {
  const int BT = B * T, h = hd / 2, group = NH / KV;
  const size_t C = static_cast<size_t>(NH) * hd, ld = (static_cast<size_t>(NH) + 2 * KV) * hd;
  const size_t kv_size = static_cast<size_t>(KV) * hd;
#pragma omp parallel num_threads(num_threads())
  {
    std::vector<float> dk(static_cast<size_t>(hd));  // a KV head's summed, still rotated
#pragma omp for schedule(static)
    for (int row = 0; row < BT; row++) {
      const float* c = cos + static_cast<size_t>(row % T) * h;
      const float* s = sin + static_cast<size_t>(row % T) * h;
      const float* d = dout + row * 3 * C;
      float* dq = dqkv + row * ld;
      float* dk_out = dq + C;
      float* dv_out = dk_out + kv_size;
      for (int head = 0; head < NH; head++)
        rotate_back(dq + static_cast<size_t>(head) * hd, d + static_cast<size_t>(head) * hd, c, s,
                    h);
      for (int kv = 0; kv < KV; kv++) {
        float* dv = dv_out + static_cast<size_t>(kv) * hd;
        const size_t first = static_cast<size_t>(kv) * group * hd;  // the group's first head
        std::memcpy(dk.data(), d + C + first, sizeof(float) * hd);
        std::memcpy(dv, d + 2 * C + first, sizeof(float) * hd);
        for (int g = 1; g < group; g++) {
          const float* dkg = d + C + first + static_cast<size_t>(g) * hd;
          const float* dvg = dkg + C;
          for (int i = 0; i < hd; i++) {
            dk[static_cast<size_t>(i)] += dkg[i];
            dv[i] += dvg[i];
          }
        }
        rotate_back(dk_out + static_cast<size_t>(kv) * hd, dk.data(), c, s, h);
      }
    }
  }
}

}  // namespace troupe::nn
