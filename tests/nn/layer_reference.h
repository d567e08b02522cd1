// Double-precision forward passes of the nn layers, written for clarity, not speed: the
// references that layers_test.cc checks the fp32 forwards against and differentiates by central
// differences to check the fp32 backwards.
// Shapes: B = batch size, T = sequence length, C = channels, OC = output channels, NH = heads,
// V = real vocabulary, Vp = padded row length.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <vector>

namespace troupe::nn::reference {

using Vec = std::vector<double>;

inline Vec encoder(const std::vector<int32_t>& inp, const Vec& wte, const Vec& wpe, int B, int T,
                   int C) {
  Vec out(static_cast<size_t>(B) * T * C);
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++)
      for (int i = 0; i < C; i++)
        out[(b * T + t) * C + i] = wte[inp[b * T + t] * C + i] + wpe[t * C + i];
  return out;
}

inline Vec layernorm(const Vec& inp, const Vec& weight, const Vec& bias, int BT, int C) {
  Vec out(inp.size());
  for (int r = 0; r < BT; r++) {
    double m = 0.0, v = 0.0;
    for (int i = 0; i < C; i++)
      m += inp[r * C + i];
    m /= C;
    for (int i = 0; i < C; i++)
      v += (inp[r * C + i] - m) * (inp[r * C + i] - m);
    double s = 1.0 / std::sqrt(v / C + 1e-5);
    for (int i = 0; i < C; i++)
      out[r * C + i] = (inp[r * C + i] - m) * s * weight[i] + bias[i];
  }
  return out;
}

// bias may be empty (no bias).
inline Vec linear(const Vec& inp, const Vec& weight, const Vec& bias, int BT, int C, int OC) {
  Vec out(static_cast<size_t>(BT) * OC);
  for (int r = 0; r < BT; r++)
    for (int o = 0; o < OC; o++) {
      double s = bias.empty() ? 0.0 : bias[o];
      for (int i = 0; i < C; i++)
        s += inp[r * C + i] * weight[o * C + i];
      out[r * OC + o] = s;
    }
  return out;
}

// Returns out [B, T, C]; att (if not null) receives [B, NH, T, T] with zeros above the diagonal.
inline Vec attention(const Vec& inp, int B, int T, int C, int NH, Vec* att = nullptr) {
  const int hs = C / NH;
  Vec out(static_cast<size_t>(B) * T * C, 0.0);
  if (att != nullptr) att->assign(static_cast<size_t>(B) * NH * T * T, 0.0);
  auto at = [&](int b, int t, int part, int h, int i) {
    return inp[(b * T + t) * 3 * C + part * C + h * hs + i];
  };
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int t = 0; t < T; t++) {
        Vec w(t + 1);
        double mx = -INFINITY;
        for (int t2 = 0; t2 <= t; t2++) {
          double s = 0.0;
          for (int i = 0; i < hs; i++)
            s += at(b, t, 0, h, i) * at(b, t2, 1, h, i);
          w[t2] = s / std::sqrt(static_cast<double>(hs));
          mx = std::max(mx, w[t2]);
        }
        double sum = 0.0;
        for (double& x : w)
          sum += (x = std::exp(x - mx));
        for (int t2 = 0; t2 <= t; t2++) {
          w[t2] /= sum;
          if (att != nullptr) (*att)[((b * NH + h) * T + t) * T + t2] = w[t2];
          for (int i = 0; i < hs; i++)
            out[(b * T + t) * C + h * hs + i] += w[t2] * at(b, t2, 2, h, i);
        }
      }
  return out;
}

inline Vec gelu(const Vec& inp) {
  Vec out(inp.size());
  const double k = std::sqrt(2.0 / std::numbers::pi);
  for (size_t i = 0; i < inp.size(); i++) {
    double x = inp[i];
    out[i] = 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
  }
  return out;
}

inline Vec residual(const Vec& a, const Vec& b) {
  Vec out(a.size());
  for (size_t i = 0; i < a.size(); i++)
    out[i] = a[i] + b[i];
  return out;
}

// Per-position losses [BT] of softmax cross-entropy over the first V of Vp columns.
inline Vec crossentropy(const Vec& logits, const std::vector<int32_t>& targets, int BT, int V,
                        int Vp) {
  Vec losses(BT);
  for (int r = 0; r < BT; r++) {
    const double* x = logits.data() + static_cast<size_t>(r) * Vp;
    double mx = *std::max_element(x, x + V);
    double sum = 0.0;
    for (int i = 0; i < V; i++)
      sum += std::exp(x[i] - mx);
    losses[r] = mx + std::log(sum) - x[targets[r]];
  }
  return losses;
}

}  // namespace troupe::nn::reference
