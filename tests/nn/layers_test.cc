// The nn layers against double-precision references (tests/nn/layer_reference.h): every forward
// against the reference forward, every backward against central differences of the reference
// forward, and the tensor-parallel layers against the unsplit ones with tp ranks simulated as
// threads in this process.
//
// Tolerances. A value passes when |got - want| <= atol + rtol * |want|:
//   forward, fp32 against double:               atol 1e-6, rtol 1e-5
//   backward, fp32 against double differences:  atol 1e-6, rtol 1e-4 (central differences with
//     h = 1e-5 in double are good to ~1e-9; the rest is fp32 rounding of O(10) terms)
//   tensor-parallel against unsplit, both fp32: atol 1e-6, rtol 1e-5 (sums in another order)
// The worst error seen is under 15% of its tolerance.
// Every gradient buffer starts at kPrefill, not 0, to check that backward passes accumulate.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <random>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "nn/layers/attention.h"
#include "nn/layers/crossentropy.h"
#include "nn/layers/detail/exp.h"
#include "nn/layers/encoder.h"
#include "nn/layers/gelu.h"
#include "nn/layers/layernorm.h"
#include "nn/layers/linear.h"
#include "nn/layers/parallel.h"
#include "nn/layers/residual.h"
#include "nn/threads.h"
#include "tests/nn/layer_reference.h"
#include "tests/nn/simulated_group.h"

namespace troupe::nn {
namespace {

using reference::Vec;
using Floats = std::vector<float>;

constexpr float kPrefill = 0.25f;
constexpr double kFwdAtol = 1e-6, kFwdRtol = 1e-5;
constexpr double kGradAtol = 1e-6, kGradRtol = 1e-4;
constexpr double kTpAtol = 1e-6, kTpRtol = 1e-5;

Floats random_floats(size_t n, uint32_t seed, float scale = 1.0f, float offset = 0.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Floats v(n);
  for (float& x : v)
    x = offset + scale * normal(rng);
  return v;
}

std::vector<int32_t> random_tokens(size_t n, int V, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> pick(0, V - 1);
  std::vector<int32_t> v(n);
  for (int32_t& x : v)
    x = pick(rng);
  return v;
}

Vec to_double(const Floats& v) {
  return Vec(v.begin(), v.end());
}

Floats prefilled(size_t n) {
  return Floats(n, kPrefill);
}

double dot(const Vec& a, const Vec& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); i++)
    s += a[i] * b[i];
  return s;
}

// Every element of got within atol + rtol * |want|; reports the worst.
void expect_close(std::string_view what, const Floats& got, const Vec& want, double atol,
                  double rtol) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double worst = 0.0;
  size_t at = 0;
  for (size_t i = 0; i < got.size(); i++) {
    double ratio = std::abs(got[i] - want[i]) / (atol + rtol * std::abs(want[i]));
    if (!(ratio <= worst)) worst = ratio, at = i;
  }
  EXPECT_LE(worst, 1.0) << what << "[" << at << "] = " << got[at] << ", want " << want[at];
}

// Central differences of objective() with respect to each element of x, which it reads.
Vec numerical_gradient(Vec& x, const std::function<double()>& objective) {
  constexpr double h = 1e-5;
  Vec grad(x.size());
  for (size_t i = 0; i < x.size(); i++) {
    const double saved = x[i];
    x[i] = saved + h;
    const double up = objective();
    x[i] = saved - h;
    const double down = objective();
    x[i] = saved;
    grad[i] = (up - down) / (2 * h);
  }
  return grad;
}

// got, accumulated onto kPrefill, against the central differences of objective() in x.
void expect_gradient(std::string_view what, const Floats& got, Vec& x,
                     const std::function<double()>& objective) {
  Vec want = numerical_gradient(x, objective);
  for (double& w : want)
    w += kPrefill;
  expect_close(what, got, want, kGradAtol, kGradRtol);
}

TEST(ExpFastTest, WithinThreeUlpOfExpAndSaturates) {
  double worst = 0.0;
  for (float x = -87.0f; x < 88.0f; x += 0.000731f) {
    worst = std::max(worst, std::abs(detail::exp_fast(x) / std::exp(double{x}) - 1.0));
  }
  EXPECT_LT(worst, 3 * 1.2e-7);
  EXPECT_GT(detail::exp_fast(-1000.0f), 0.0f);
  EXPECT_GT(detail::exp_fast(-INFINITY), 0.0f);
  EXPECT_TRUE(std::isfinite(detail::exp_fast(1000.0f)));
  EXPECT_TRUE(std::isnan(detail::exp_fast(NAN)));
}

TEST(EncoderTest, ForwardAndGradients) {
  const int B = 2, T = 5, C = 8, V = 5, maxT = 7;  // V < B*T: tokens repeat
  const std::vector<int32_t> inp = random_tokens(B * T, V, 1);
  const Floats wte = random_floats(V * C, 2), wpe = random_floats(maxT * C, 3);
  const Floats dout = random_floats(B * T * C, 4);
  Floats out(B * T * C);
  encoder_forward(out.data(), inp.data(), wte.data(), wpe.data(), B, T, C);
  Vec wte_d = to_double(wte), wpe_d = to_double(wpe), r = to_double(dout);
  expect_close("out", out, reference::encoder(inp, wte_d, wpe_d, B, T, C), kFwdAtol, kFwdRtol);

  Floats dwte = prefilled(wte.size()), dwpe = prefilled(wpe.size());
  encoder_backward(dwte.data(), dwpe.data(), dout.data(), inp.data(), B, T, C);
  auto objective = [&] { return dot(reference::encoder(inp, wte_d, wpe_d, B, T, C), r); };
  expect_gradient("dwte", dwte, wte_d, objective);
  expect_gradient("dwpe", dwpe, wpe_d, objective);
}

TEST(LayerNormTest, ForwardAndGradients) {
  const int B = 2, T = 3, C = 20;
  const Floats inp = random_floats(B * T * C, 1, 2.0f, 0.5f);
  const Floats weight = random_floats(C, 2, 0.2f, 1.0f), bias = random_floats(C, 3);
  const Floats dout = random_floats(B * T * C, 4);
  Floats out(inp.size()), mean(B * T), rstd(B * T);
  layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(), bias.data(), B,
                    T, C);
  Vec x = to_double(inp), w = to_double(weight), b = to_double(bias), r = to_double(dout);
  expect_close("out", out, reference::layernorm(x, w, b, B * T, C), kFwdAtol, kFwdRtol);

  Floats dinp = prefilled(inp.size()), dweight = prefilled(C), dbias = prefilled(C);
  layernorm_backward(dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(),
                     weight.data(), mean.data(), rstd.data(), B, T, C);
  auto objective = [&] { return dot(reference::layernorm(x, w, b, B * T, C), r); };
  expect_gradient("dinp", dinp, x, objective);
  expect_gradient("dweight", dweight, w, objective);
  expect_gradient("dbias", dbias, b, objective);
}

class LinearTest : public testing::TestWithParam<bool> {};

TEST_P(LinearTest, ForwardAndGradients) {
  const bool with_bias = GetParam();
  const int B = 2, T = 3, C = 8, OC = 12;
  const Floats inp = random_floats(B * T * C, 1), weight = random_floats(OC * C, 2, 0.5f);
  const Floats bias = with_bias ? random_floats(OC, 3) : Floats{};
  const Floats dout = random_floats(B * T * OC, 4);
  const float* bias_ptr = with_bias ? bias.data() : nullptr;
  Floats out(B * T * OC);
  linear_forward(out.data(), inp.data(), weight.data(), bias_ptr, B, T, C, OC);
  Vec x = to_double(inp), w = to_double(weight), b = to_double(bias), r = to_double(dout);
  expect_close("out", out, reference::linear(x, w, b, B * T, C, OC), kFwdAtol, kFwdRtol);

  Floats dinp = prefilled(inp.size()), dweight = prefilled(weight.size()), dbias = prefilled(OC);
  linear_backward(dinp.data(), dweight.data(), with_bias ? dbias.data() : nullptr, dout.data(),
                  inp.data(), weight.data(), B, T, C, OC);
  auto objective = [&] { return dot(reference::linear(x, w, b, B * T, C, OC), r); };
  expect_gradient("dinp", dinp, x, objective);
  expect_gradient("dweight", dweight, w, objective);
  if (with_bias) expect_gradient("dbias", dbias, b, objective);

  // Without dinp (a first layer) the other gradients are the same.
  Floats dweight2 = prefilled(weight.size());
  linear_backward(nullptr, dweight2.data(), nullptr, dout.data(), inp.data(), weight.data(), B, T,
                  C, OC);
  EXPECT_EQ(dweight2, dweight);
}

INSTANTIATE_TEST_SUITE_P(Bias, LinearTest, testing::Bool());

struct AttentionShape {
  int B, T, C, NH;
};
class AttentionTest : public testing::TestWithParam<AttentionShape> {};

// Head sizes 4 and 12 take the scalar edges of detail::tile; 16 and 32 its vector path, with
// T not a multiple of the 4 x 16 tile.
TEST_P(AttentionTest, ForwardAndGradients) {
  const auto [B, T, C, NH] = GetParam();
  const Floats inp = random_floats(B * T * 3 * C, 1), dout = random_floats(B * T * C, 2);
  Floats out(B * T * C), att(B * NH * T * T, -1.0f);
  attention_forward(out.data(), att.data(), inp.data(), B, T, C, NH);
  Vec x = to_double(inp), r = to_double(dout), att_want;
  expect_close("out", out, reference::attention(x, B, T, C, NH, &att_want), kFwdAtol, kFwdRtol);
  expect_close("att", att, att_want, kFwdAtol, kFwdRtol);  // with exact zeros above the diagonal

  Floats dinp = prefilled(inp.size());
  attention_backward(dinp.data(), dout.data(), inp.data(), att.data(), B, T, C, NH);
  auto objective = [&] { return dot(reference::attention(x, B, T, C, NH), r); };
  expect_gradient("dinp", dinp, x, objective);
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionTest,
                         testing::Values(AttentionShape{2, 7, 12, 3}, AttentionShape{1, 6, 36, 3},
                                         AttentionShape{1, 5, 16, 1}, AttentionShape{2, 19, 64, 2}),
                         [](const testing::TestParamInfo<AttentionShape>& param) {
                           const AttentionShape& s = param.param;
                           return absl::StrCat("B", s.B, "_T", s.T, "_C", s.C, "_NH", s.NH);
                         });

// Flash attention, on both kernel widths where the CPU has AVX-512 (TROUPE_NN_NO_AVX512 picks
// the 8-wide one): the output against the reference, lse against the log-sum-exp of the scaled
// scores, the backward against central differences. Head sizes 4, 12, 36 (column padding), 16,
// 32 and 64; T below, at and across the 32-row query block.
struct FlashShape {
  int B, T, C, NH;
  bool wide;
};
class FlashAttentionTest : public testing::TestWithParam<FlashShape> {};

// The log-sum-exp of row t of (b, h): log sum over s <= t of exp(q.k / sqrt(hs)).
Vec reference_lse(const Vec& inp, int B, int T, int C, int NH) {
  const int hs = C / NH;
  Vec lse(static_cast<size_t>(B) * NH * T);
  for (int b = 0; b < B; b++) {
    for (int h = 0; h < NH; h++) {
      for (int t = 0; t < T; t++) {
        const double* q = &inp[(static_cast<size_t>(b) * T + t) * 3 * C + h * hs];
        std::vector<double> s(t + 1);
        double m = -INFINITY;
        for (int u = 0; u <= t; u++) {
          const double* k = &inp[(static_cast<size_t>(b) * T + u) * 3 * C + C + h * hs];
          double d = 0.0;
          for (int i = 0; i < hs; i++)
            d += q[i] * k[i];
          s[u] = d / std::sqrt(static_cast<double>(hs));
          m = std::max(m, s[u]);
        }
        double sum = 0.0;
        for (double v : s)
          sum += std::exp(v - m);
        lse[(static_cast<size_t>(b) * NH + h) * T + t] = m + std::log(sum);
      }
    }
  }
  return lse;
}

class ScopedNarrowKernels {
 public:
  explicit ScopedNarrowKernels(bool narrow) {
    if (narrow) setenv("TROUPE_NN_NO_AVX512", "1", 1);
  }
  ~ScopedNarrowKernels() { unsetenv("TROUPE_NN_NO_AVX512"); }
};

TEST_P(FlashAttentionTest, ForwardAndGradients) {
  const auto [B, T, C, NH, wide] = GetParam();
  ScopedNarrowKernels narrow(!wide);
  const Floats inp = random_floats(B * T * 3 * C, 1), dout = random_floats(B * T * C, 2);
  Floats out(B * T * C, -1.0f), lse(B * NH * T, -1.0f);
  flash_attention_forward(out.data(), lse.data(), inp.data(), B, T, C, NH);
  Vec x = to_double(inp), r = to_double(dout);
  expect_close("out", out, reference::attention(x, B, T, C, NH), kFwdAtol, kFwdRtol);
  expect_close("lse", lse, reference_lse(x, B, T, C, NH), kFwdAtol, kFwdRtol);

  Floats dinp = prefilled(inp.size());
  flash_attention_backward(dinp.data(), dout.data(), inp.data(), out.data(), lse.data(), B, T, C,
                           NH);
  auto objective = [&] { return dot(reference::attention(x, B, T, C, NH), r); };
  expect_gradient("dinp", dinp, x, objective);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, FlashAttentionTest,
    testing::Values(FlashShape{2, 7, 12, 3, true}, FlashShape{1, 6, 36, 3, true},
                    FlashShape{1, 5, 16, 1, true}, FlashShape{2, 19, 64, 2, true},
                    FlashShape{1, 33, 36, 1, true}, FlashShape{1, 40, 64, 1, true},
                    FlashShape{2, 7, 12, 3, false}, FlashShape{1, 33, 36, 1, false},
                    FlashShape{1, 40, 64, 1, false}, FlashShape{1, 32, 64, 1, false}),
    [](const testing::TestParamInfo<FlashShape>& param) {
      const FlashShape& s = param.param;
      return absl::StrCat("B", s.B, "_T", s.T, "_C", s.C, "_NH", s.NH, s.wide ? "" : "_narrow");
    });

// At a training-like length (several query blocks, hs 64): the same values as the attention that
// stores the probabilities, within rounding, and the same bits on a second run.
TEST(FlashAttentionTest, MatchesStoredAttentionAtLength100) {
  const int B = 2, T = 100, C = 128, NH = 2;
  const Floats qkv = random_floats(B * T * 3 * C, 1, 0.5f), dout = random_floats(B * T * C, 2);
  Floats out(B * T * C), att(B * NH * T * T), dqkv(qkv.size(), 0.0f);
  attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
  attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH);
  for (bool wide : {true, false}) {
    ScopedNarrowKernels narrow(!wide);
    Floats fout(out.size()), lse(B * NH * T), fd(qkv.size(), 0.0f), again(qkv.size(), 0.0f);
    flash_attention_forward(fout.data(), lse.data(), qkv.data(), B, T, C, NH);
    flash_attention_backward(fd.data(), dout.data(), qkv.data(), fout.data(), lse.data(), B, T, C,
                             NH);
    flash_attention_backward(again.data(), dout.data(), qkv.data(), fout.data(), lse.data(), B, T,
                             C, NH);
    EXPECT_EQ(fd, again);
    expect_close(wide ? "out" : "out, narrow", fout, to_double(out), 1e-6, 1e-4);
    expect_close(wide ? "dqkv" : "dqkv, narrow", fd, to_double(dqkv), 1e-5, 1e-3);
  }
}

TEST(GeluTest, ForwardAndGradients) {
  Floats inp(97);
  for (size_t i = 0; i < inp.size(); i++)
    inp[i] = -6.0f + 12.0f * i / (inp.size() - 1);
  const Floats dout = random_floats(inp.size(), 1);
  Floats out(inp.size());
  gelu_forward(out.data(), inp.data(), inp.size());
  Vec x = to_double(inp), r = to_double(dout);
  expect_close("out", out, reference::gelu(x), kFwdAtol, kFwdRtol);

  Floats dinp = prefilled(inp.size());
  gelu_backward(dinp.data(), dout.data(), inp.data(), inp.size());
  expect_gradient("dinp", dinp, x, [&] { return dot(reference::gelu(x), r); });
}

TEST(ResidualTest, ForwardAndGradients) {
  const size_t N = 50;
  const Floats a = random_floats(N, 1), b = random_floats(N, 2), dout = random_floats(N, 3);
  Floats out(N);
  residual_forward(out.data(), a.data(), b.data(), N);
  Vec x1 = to_double(a), x2 = to_double(b), r = to_double(dout);
  expect_close("out", out, reference::residual(x1, x2), kFwdAtol, kFwdRtol);

  Floats d1 = prefilled(N), d2 = prefilled(N);
  residual_backward(d1.data(), d2.data(), dout.data(), N);
  auto objective = [&] { return dot(reference::residual(x1, x2), r); };
  expect_gradient("dinp1", d1, x1, objective);
  expect_gradient("dinp2", d2, x2, objective);
}

TEST(CrossEntropyTest, ForwardAndGradientsOverPaddedVocab) {
  const int B = 2, T = 3, V = 11, Vp = 16, BT = B * T;
  const float dloss = 0.7f;
  Floats logits = random_floats(BT * Vp, 1, 3.0f);
  for (int r = 0; r < BT; r++)
    for (int i = V; i < Vp; i++)
      logits[r * Vp + i] = 100.0f;  // padding must not count
  const std::vector<int32_t> targets = random_tokens(BT, V, 2);
  Floats losses(BT), lse(BT);
  const float mean =
      crossentropy_forward(losses.data(), lse.data(), logits.data(), targets.data(), B, T, V, Vp);
  Vec x = to_double(logits);
  Vec want = reference::crossentropy(x, targets, BT, V, Vp);
  expect_close("losses", losses, want, kFwdAtol, kFwdRtol);
  double want_mean = 0.0;
  for (double l : want)
    want_mean += l / BT;
  EXPECT_NEAR(mean, want_mean, kFwdAtol + kFwdRtol * want_mean);
  EXPECT_EQ(crossentropy_forward(nullptr, lse.data(), logits.data(), targets.data(), B, T, V, Vp),
            mean);

  Floats dlogits = prefilled(logits.size());
  crossentropy_backward(dlogits.data(), dloss, logits.data(), lse.data(), targets.data(), B, T, V,
                        Vp);
  Vec grad = numerical_gradient(x, [&] {
    double s = 0.0;
    for (double l : reference::crossentropy(x, targets, BT, V, Vp))
      s += l;
    return dloss * s / BT;
  });
  for (double& g : grad)
    g += kPrefill;  // padding: exactly the prefill, untouched
  expect_close("dlogits", dlogits, grad, kGradAtol, kGradRtol);
  for (int r = 0; r < BT; r++)
    for (int i = V; i < Vp; i++)
      EXPECT_EQ(dlogits[r * Vp + i], kPrefill);

  Floats probs(logits.size(), -1.0f);
  softmax_forward(probs.data(), logits.data(), B, T, V, Vp);
  Vec probs_want(logits.size(), 0.0);
  for (int r = 0; r < BT; r++)
    for (int i = 0; i < V; i++)
      probs_want[r * Vp + i] = std::exp(x[r * Vp + i] - lse[r]);
  expect_close("probs", probs, probs_want, kFwdAtol, kFwdRtol);
}

// At training-like shapes, where the threads split the work: each backward against one
// directional derivative, (f(x + h u) - f(x - h u)) / 2h = <grad f, u>, and run twice with the
// same bits.
TEST(LayersTest, DirectionalDerivativesAtLargerShapes) {
  const int B = 3, T = 37, C = 128, NH = 2;  // hs 64, GPT-2's
  const Floats qkv = random_floats(B * T * 3 * C, 1), dout = random_floats(B * T * C, 2);
  Floats out(B * T * C), att(B * NH * T * T);
  attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
  expect_close("out", out, reference::attention(to_double(qkv), B, T, C, NH), kFwdAtol, kFwdRtol);
  Floats dinp(qkv.size(), 0.0f), again(qkv.size(), 0.0f);
  attention_backward(dinp.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH);
  attention_backward(again.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH);
  EXPECT_EQ(dinp, again);
  Vec x = to_double(qkv), u = to_double(random_floats(qkv.size(), 3)), r = to_double(dout);
  auto at = [&](double h) {
    Vec y = x;
    for (size_t i = 0; i < y.size(); i++)
      y[i] += h * u[i];
    return dot(reference::attention(y, B, T, C, NH), r);
  };
  const double want = (at(1e-4) - at(-1e-4)) / 2e-4;
  const double got = dot(to_double(dinp), u);
  EXPECT_NEAR(got, want, 1e-4 * std::abs(want) + 1e-3);

  const int OC = 4 * C;
  const Floats weight = random_floats(OC * C, 4, 0.1f), dy = random_floats(B * T * OC, 5);
  Floats dweight(weight.size(), 0.0f), dbias(OC, 0.0f), dweight2 = dweight, dbias2 = dbias;
  linear_backward(nullptr, dweight.data(), dbias.data(), dy.data(), out.data(), weight.data(), B, T,
                  C, OC);
  linear_backward(nullptr, dweight2.data(), dbias2.data(), dy.data(), out.data(), weight.data(), B,
                  T, C, OC);
  EXPECT_EQ(dweight, dweight2);
  EXPECT_EQ(dbias, dbias2);

  Floats ln_out(out.size()), mean(B * T), rstd(B * T), lw = random_floats(C, 6, 0.2f, 1.0f);
  Floats lb = random_floats(C, 7), ldin(out.size(), 0.0f), ldw(C, 0.0f), ldb(C, 0.0f);
  layernorm_forward(ln_out.data(), mean.data(), rstd.data(), out.data(), lw.data(), lb.data(), B, T,
                    C);
  layernorm_backward(ldin.data(), ldw.data(), ldb.data(), dout.data(), out.data(), lw.data(),
                     mean.data(), rstd.data(), B, T, C);
  Vec lx = to_double(out), lu = to_double(random_floats(out.size(), 8));
  Vec wd = to_double(lw), bd = to_double(lb);
  auto ln_at = [&](double h) {
    Vec y = lx;
    for (size_t i = 0; i < y.size(); i++)
      y[i] += h * lu[i];
    return dot(reference::layernorm(y, wd, bd, B * T, C), r);
  };
  const double ln_want = (ln_at(1e-4) - ln_at(-1e-4)) / 2e-4;
  EXPECT_NEAR(dot(to_double(ldin), lu), ln_want, 1e-4 * std::abs(ln_want) + 1e-3);
  double dbias_want = 0.0, dbias_got = 0.0;  // dbias is the column sum of dout
  for (size_t i = 0; i < dout.size(); i++)
    dbias_want += dout[i];
  for (float g : ldb)
    dbias_got += g;
  EXPECT_NEAR(dbias_got, dbias_want, 1e-3);
}

// The layers that split work by rows, heads or channel slices give the same bits for any thread
// count; layernorm's parameter gradients (per-thread partial sums) only for the same count.
TEST(LayersTest, ThreadCountDoesNotChangeTheBits) {
  const int B = 2, T = 21, C = 64, NH = 2, V = 50, BT = B * T;
  const Floats qkv = random_floats(BT * 3 * C, 1), dout = random_floats(BT * C, 2);
  const std::vector<int32_t> tokens = random_tokens(BT, V, 3);
  const Floats logits = random_floats(BT * V, 4, 3.0f), weight = random_floats(3 * C * C, 5);
  auto run = [&](int threads) {
    set_num_threads(threads);
    Floats out(BT * C), att(B * NH * T * T), dqkv(qkv.size(), 0.0f), dwte(V * C, 0.0f);
    Floats dwpe(T * C, 0.0f), dbias(3 * C, 0.0f), dweight(3 * C * C, 0.0f), lse(BT);
    Floats dlogits(logits.size(), 0.0f);
    attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
    attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH);
    encoder_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C);
    linear_backward(nullptr, dweight.data(), dbias.data(), qkv.data(), out.data(), weight.data(), B,
                    T, C, 3 * C);
    crossentropy_forward(nullptr, lse.data(), logits.data(), tokens.data(), B, T, V, V);
    crossentropy_backward(dlogits.data(), 1.0f, logits.data(), lse.data(), tokens.data(), B, T, V,
                          V);
    Floats fout(BT * C), flse(B * NH * T), fdqkv(qkv.size(), 0.0f);
    flash_attention_forward(fout.data(), flse.data(), qkv.data(), B, T, C, NH);
    flash_attention_backward(fdqkv.data(), dout.data(), qkv.data(), fout.data(), flse.data(), B, T,
                             C, NH);
    return std::vector<Floats>{out, att, dqkv, dwte, dwpe, dbias, lse, dlogits, fout, flse, fdqkv};
  };
  const int saved = num_threads();
  const std::vector<Floats> one = run(1);
  EXPECT_EQ(run(3), one);
  set_num_threads(saved);
}

// The backward passes that can write their input gradient instead of adding to it (GPT's
// backward uses them on buffers it would otherwise zero first): writing over NaNs gives the same
// bits as accumulating onto zeros; the cross-entropy also zeroes the padding columns.
TEST(LayersTest, WriteModeEqualsAccumulatingOntoZeros) {
  const int B = 2, T = 37, C = 64, NH = 2, V = 50, Vp = 64, BT = B * T;
  const Floats qkv = random_floats(BT * 3 * C, 1), dout = random_floats(BT * C, 2);
  const Floats x = random_floats(BT * C, 3), w = random_floats(C, 4, 0.2f, 1.0f);
  const Floats weight = random_floats(3 * C * C, 5), big = random_floats(BT * 3 * C, 6);
  const Floats logits = random_floats(BT * Vp, 7, 3.0f);
  const std::vector<int32_t> targets = random_tokens(BT, V, 8);
  auto both = [](size_t n, const std::function<void(float*, bool)>& run) {
    Floats acc(n, 0.0f), wrote(n, NAN);
    run(acc.data(), true);
    run(wrote.data(), false);
    EXPECT_EQ(acc, wrote);
  };
  Floats y(BT * C), lse(B * NH * T);
  flash_attention_forward(y.data(), lse.data(), qkv.data(), B, T, C, NH);
  both(qkv.size(), [&](float* d, bool acc) {
    flash_attention_backward(d, dout.data(), qkv.data(), y.data(), lse.data(), B, T, C, NH, acc);
  });
  both(big.size(),
       [&](float* d, bool acc) { gelu_backward(d, big.data(), qkv.data(), big.size(), acc); });
  both(x.size(), [&](float* d, bool acc) {
    Floats dw(C * 3 * C, 0.0f), db(3 * C, 0.0f);
    linear_backward(d, dw.data(), db.data(), big.data(), x.data(), weight.data(), B, T, C, 3 * C,
                    acc);
  });
  Floats mean(BT), rstd(BT), ln(BT * C);
  layernorm_forward(ln.data(), mean.data(), rstd.data(), x.data(), w.data(), w.data(), B, T, C);
  both(x.size(), [&](float* d, bool acc) {
    Floats dw(C, 0.0f), db(C, 0.0f);
    layernorm_backward(d, dw.data(), db.data(), dout.data(), x.data(), w.data(), mean.data(),
                       rstd.data(), B, T, C, acc);
  });
  Floats row_lse(BT);
  crossentropy_forward(nullptr, row_lse.data(), logits.data(), targets.data(), B, T, V, Vp);
  both(logits.size(), [&](float* d, bool acc) {
    crossentropy_backward(d, 1.0f, logits.data(), row_lse.data(), targets.data(), B, T, V, Vp, acc);
  });
}

// Columns [c0, c0 + n) of the rows x cols matrix m.
Floats columns(const Floats& m, int rows, int cols, int c0, int n) {
  Floats out(static_cast<size_t>(rows) * n);
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < n; c++)
      out[r * n + c] = m[r * cols + c0 + c];
  return out;
}
Floats rows_of(const Floats& m, int cols, int r0, int n) {
  return Floats(m.begin() + r0 * cols, m.begin() + (r0 + n) * cols);
}
void expect_tp(std::string_view what, const Floats& got, const Floats& want) {
  expect_close(what, got, to_double(want), kTpAtol, kTpRtol);
}

class TensorParallelTest : public testing::TestWithParam<int> {};

TEST_P(TensorParallelTest, ColumnParallelLinearMatchesLinear) {
  const int tp = GetParam(), B = 2, T = 3, C = 8, OC = 12, BT = B * T, OCl = OC / tp;
  const Floats inp = random_floats(BT * C, 1), weight = random_floats(OC * C, 2);
  const Floats bias = random_floats(OC, 3), dout = random_floats(BT * OC, 4);
  Floats out(BT * OC), dinp = prefilled(BT * C), dweight = prefilled(OC * C), dbias = prefilled(OC);
  linear_forward(out.data(), inp.data(), weight.data(), bias.data(), B, T, C, OC);
  linear_backward(dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(), weight.data(),
                  B, T, C, OC);

  SimulatedGroup group(tp);
  group.run([&](int rank) {
    const int o0 = rank * OCl;
    const Floats w = rows_of(weight, C, o0, OCl), b = rows_of(bias, 1, o0, OCl);
    const Floats g = columns(dout, BT, OC, o0, OCl);
    Floats y(BT * OCl), dx = prefilled(BT * C), scratch(BT * C), dw = prefilled(OCl * C);
    Floats db = prefilled(OCl);
    column_parallel_linear_forward(y.data(), inp.data(), w.data(), b.data(), B, T, C, OCl);
    EXPECT_TRUE(column_parallel_linear_backward(dx.data(), scratch.data(), dw.data(), db.data(),
                                                g.data(), inp.data(), w.data(), B, T, C, OCl,
                                                group.sum(rank))
                    .ok());
    expect_tp("out_shard", y, columns(out, BT, OC, o0, OCl));
    expect_tp("dinp", dx, dinp);
    expect_tp("dweight_shard", dw, rows_of(dweight, C, o0, OCl));
    expect_tp("dbias_shard", db, rows_of(dbias, 1, o0, OCl));
  });
  EXPECT_EQ(group.calls(), 1);
}

TEST_P(TensorParallelTest, RowParallelLinearMatchesLinear) {
  const int tp = GetParam(), B = 2, T = 3, C = 8, OC = 12, BT = B * T, Cl = C / tp;
  const Floats inp = random_floats(BT * C, 1), weight = random_floats(OC * C, 2);
  const Floats bias = random_floats(OC, 3), dout = random_floats(BT * OC, 4);
  Floats out(BT * OC), dinp = prefilled(BT * C), dweight = prefilled(OC * C), dbias = prefilled(OC);
  linear_forward(out.data(), inp.data(), weight.data(), bias.data(), B, T, C, OC);
  linear_backward(dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(), weight.data(),
                  B, T, C, OC);

  SimulatedGroup group(tp);
  group.run([&](int rank) {
    const int c0 = rank * Cl;
    const Floats x = columns(inp, BT, C, c0, Cl), w = columns(weight, OC, C, c0, Cl);
    Floats y(BT * OC), dx = prefilled(BT * Cl), dw = prefilled(OC * Cl), db = prefilled(OC);
    EXPECT_TRUE(row_parallel_linear_forward(y.data(), x.data(), w.data(), bias.data(), B, T, Cl, OC,
                                            group.sum(rank))
                    .ok());
    row_parallel_linear_backward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(),
                                 B, T, Cl, OC);
    expect_tp("out", y, out);
    expect_tp("dinp_shard", dx, columns(dinp, BT, C, c0, Cl));
    expect_tp("dweight_shard", dw, columns(dweight, OC, C, c0, Cl));
    expect_tp("dbias", db, dbias);
  });
  EXPECT_EQ(group.calls(), 1);
}

TEST_P(TensorParallelTest, VocabParallelEmbeddingMatchesEncoder) {
  const int tp = GetParam(), B = 2, T = 5, C = 8, V = 11, Vp = 12, Vl = Vp / tp;
  const std::vector<int32_t> inp = random_tokens(B * T, V, 1);
  const Floats wte = random_floats(Vp * C, 2), wpe = random_floats(T * C, 3);
  const Floats dout = random_floats(B * T * C, 4);
  Floats out(B * T * C), dwte = prefilled(wte.size()), dwpe = prefilled(wpe.size());
  encoder_forward(out.data(), inp.data(), wte.data(), wpe.data(), B, T, C);
  encoder_backward(dwte.data(), dwpe.data(), dout.data(), inp.data(), B, T, C);

  SimulatedGroup group(tp);
  group.run([&](int rank) {
    const int v0 = rank * Vl;
    const Floats w = rows_of(wte, C, v0, Vl);
    Floats y(out.size()), dw = prefilled(w.size()), dp = prefilled(wpe.size());
    EXPECT_TRUE(vocab_parallel_embedding_forward(y.data(), inp.data(), w.data(), wpe.data(), v0,
                                                 v0 + Vl, B, T, C, group.sum(rank))
                    .ok());
    vocab_parallel_embedding_backward(dw.data(), dp.data(), dout.data(), inp.data(), v0, v0 + Vl, B,
                                      T, C);
    expect_tp("out", y, out);
    expect_tp("dwte_shard", dw, rows_of(dwte, C, v0, Vl));
    expect_tp("dwpe", dp, dwpe);
  });
  EXPECT_EQ(group.calls(), 1);
}

TEST_P(TensorParallelTest, VocabParallelCrossEntropyMatchesCrossEntropy) {
  // With tp = 4 the last rank holds padding only.
  const int tp = GetParam(), B = 2, T = 3, V = 11, Vp = 16, BT = B * T, Vl = Vp / tp;
  const float dloss = 0.7f;
  Floats logits = random_floats(BT * Vp, 1, 3.0f);
  for (int r = 0; r < BT; r++)
    for (int i = V; i < Vp; i++)
      logits[r * Vp + i] = 100.0f;
  const std::vector<int32_t> targets = random_tokens(BT, V, 2);
  Floats losses(BT), lse(BT), dlogits = prefilled(logits.size());
  const float mean =
      crossentropy_forward(losses.data(), lse.data(), logits.data(), targets.data(), B, T, V, Vp);
  crossentropy_backward(dlogits.data(), dloss, logits.data(), lse.data(), targets.data(), B, T, V,
                        Vp);

  SimulatedGroup group(tp);
  group.run([&](int rank) {
    const int v0 = rank * Vl;
    const Floats x = columns(logits, BT, Vp, v0, Vl);
    Floats l(BT), s(BT), dx = prefilled(x.size());
    const absl::StatusOr<float> m =
        vocab_parallel_crossentropy_forward(l.data(), s.data(), x.data(), targets.data(), v0, Vl, V,
                                            B, T, group.max(rank), group.sum(rank));
    ASSERT_TRUE(m.ok()) << m.status();
    vocab_parallel_crossentropy_backward(dx.data(), dloss, x.data(), s.data(), targets.data(), v0,
                                         Vl, V, B, T);
    expect_tp("mean", {*m}, {mean});
    expect_tp("losses", l, losses);
    expect_tp("lse", s, lse);
    expect_tp("dlogits_shard", dx, columns(dlogits, BT, Vp, v0, Vl));
  });
  EXPECT_EQ(group.calls(), 2);
}

// A collective that fails (an aborted group) is the layer's error, and nothing runs after it.
TEST(TensorParallelErrorsTest, AFailedCollectiveIsTheLayersError) {
  const int B = 1, T = 2, C = 4, OC = 4, V = 8;
  int calls = 0;
  const AllReduceFn aborted = [&calls](float*, size_t) {
    ++calls;
    return absl::AbortedError("group tp: member 1 lost");
  };
  const Floats x = random_floats(B * T * C, 1), w = random_floats(OC * C, 2);
  Floats y(B * T * OC), scratch(B * T * C), dx = prefilled(B * T * C), dw = prefilled(OC * C);
  EXPECT_EQ(row_parallel_linear_forward(y.data(), x.data(), w.data(), nullptr, B, T, C, OC, aborted)
                .code(),
            absl::StatusCode::kAborted);
  EXPECT_EQ(column_parallel_linear_backward(dx.data(), scratch.data(), dw.data(), nullptr, y.data(),
                                            x.data(), w.data(), B, T, C, OC, aborted)
                .code(),
            absl::StatusCode::kAborted);
  const std::vector<int32_t> tokens = random_tokens(B * T, V, 3);
  const Floats wte = random_floats(V * C, 4), logits = random_floats(B * T * V, 5);
  Floats out(B * T * C), losses(B * T), lse(B * T);
  EXPECT_EQ(vocab_parallel_embedding_forward(out.data(), tokens.data(), wte.data(), nullptr, 0, V,
                                             B, T, C, aborted)
                .code(),
            absl::StatusCode::kAborted);
  absl::StatusOr<float> loss = vocab_parallel_crossentropy_forward(
      losses.data(), lse.data(), logits.data(), tokens.data(), 0, V, V, B, T, aborted, aborted);
  EXPECT_EQ(loss.status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(calls, 4) << "each layer stops at its first failed collective";
}

INSTANTIATE_TEST_SUITE_P(Ranks, TensorParallelTest, testing::Values(2, 4),
                         [](const testing::TestParamInfo<int>& param) {
                           return absl::StrCat("tp", param.param);
                         });

}  // namespace
}  // namespace troupe::nn
