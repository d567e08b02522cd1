// nn/optim: AdamW and SGD against an fp64 reference of their documented formulas, against the
// same formulas in scalar fp32 (bit for bit: the vector and tail paths agree) and against
// PyTorch (constants from tests/reference/optim_reference.py); DeepSpeed's schedules at their
// boundary steps; global-norm clipping; DeepSpeed's loss-scaler state machine step by step;
// fp32 <-> 16-bit copies for mixed precision.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <numbers>
#include <random>
#include <span>
#include <string_view>
#include <vector>

#include "nn/optim/adamw.h"
#include "nn/optim/clip.h"
#include "nn/optim/loss_scaler.h"
#include "nn/optim/lr_schedule.h"
#include "nn/optim/param_range.h"
#include "nn/optim/sgd.h"
#include "tests/nn/optim_reference.h"

namespace troupe::nn {
namespace {

// PyTorch's values: python3 tests/reference/optim_reference.py > tests/nn/optim_reference.h
namespace ref = optim_reference;

// The problem of optim_reference.py: dyadic values, exact in fp32.
constexpr int kSteps = 5;
float p0_at(size_t i) {
  return static_cast<float>((static_cast<int>(5 * i % 11) - 5) / 4.0);
}
float grad_at(size_t i, int t) {
  return static_cast<float>((static_cast<int>((7 * i + 13 * t) % 17) - 8) / 8.0 *
                            std::ldexp(1.0, static_cast<int>(i % 5) - 2));
}
std::vector<float> initial_params(size_t n) {
  std::vector<float> p(n);
  for (size_t i = 0; i < n; ++i)
    p[i] = p0_at(i);
  return p;
}
std::vector<float> grads_of_step(size_t n, int t) {
  std::vector<float> g(n);
  for (size_t i = 0; i < n; ++i)
    g[i] = grad_at(i, t);
  return g;
}

// Distance in units in the last place (0 for equal values, 1 for neighbours).
int64_t ulp_distance(float a, float b) {
  auto ordered = [](float x) {
    const int32_t i = std::bit_cast<int32_t>(x);
    return i < 0 ? static_cast<int64_t>(INT32_MIN) - i : static_cast<int64_t>(i);
  };
  return std::llabs(ordered(a) - ordered(b));
}

// The magnitude of element i's gradients (grad_at): values that result from cancelling them
// (momentum near 0) are compared in ulps of this rather than of themselves.
float grad_scale(size_t i) {
  return std::ldexp(1.0f, static_cast<int>(i % 5) - 2);
}

// |got - want| <= ulps units in the last place of max(|want|, grad_scale(i)).
void expect_within_ulps(std::span<const float> got, std::span<const float> want, int ulps,
                        const char* what) {
  ASSERT_EQ(got.size(), want.size());
  int64_t worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const float magnitude = std::max(std::fabs(want[i]), grad_scale(i));
    const float ulp = std::nextafter(magnitude, INFINITY) - magnitude;
    EXPECT_LE(std::fabs(got[i] - want[i]), ulps * ulp)
        << what << "[" << i << "]: " << got[i] << " vs " << want[i];
    worst = std::max(worst, ulp_distance(got[i], want[i]));
  }
  std::printf("%s: max %lld ulp from PyTorch\n", what, static_cast<long long>(worst));
}

// ---- AdamW ----

constexpr AdamWConfig kGptAdamW = {
    .lr = 0.01f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
float lr_of_step(int t) {
  return static_cast<float>(0.01 * t);
}

struct AdamWState {
  std::vector<float> p, m, v;
};

// kSteps steps of adamw_update on the reference problem, lr_t = 0.01 t.
AdamWState run_adamw(size_t n, const AdamWConfig& c, std::span<const ParamRange> no_decay) {
  AdamWState s{initial_params(n), std::vector<float>(n), std::vector<float>(n)};
  for (int t = 1; t <= kSteps; ++t) {
    std::vector<float> g = grads_of_step(n, t);
    adamw_update(s.p.data(), g.data(), s.m.data(), s.v.data(), n, c, lr_of_step(t), t, no_decay);
  }
  return s;
}

class AdamWSizeTest : public ::testing::TestWithParam<size_t> {};

// The textbook form of the formula (torch's documented algorithm) in fp64:
// p -= lr wd p; p -= lr mhat / (sqrt(vhat) + eps).
TEST_P(AdamWSizeTest, MatchesFp64ReferenceOverSteps) {
  const size_t n = GetParam();
  const ParamRange no_decay[] = {{0, std::min<size_t>(n, 2)}};
  AdamWState got = run_adamw(n, kGptAdamW, no_decay);
  const double b1 = kGptAdamW.beta1, b2 = kGptAdamW.beta2, eps = kGptAdamW.eps;
  for (size_t i = 0; i < n; ++i) {
    double p = p0_at(i), m = 0, v = 0;
    const double wd = i < 2 ? 0.0 : kGptAdamW.weight_decay;
    for (int t = 1; t <= kSteps; ++t) {
      const double g = grad_at(i, t), lr = lr_of_step(t);
      p -= lr * wd * p;
      m = b1 * m + (1 - b1) * g;
      v = b2 * v + (1 - b2) * g * g;
      const double mhat = m / (1 - std::pow(b1, t)), vhat = v / (1 - std::pow(b2, t));
      p -= lr * mhat / (std::sqrt(vhat) + eps);
    }
    EXPECT_NEAR(got.p[i], p, 2e-6 * std::max(1.0, std::fabs(p))) << i;
    // m and v cancel gradients of both signs: their error is relative to the gradients'.
    EXPECT_NEAR(got.m[i], m, 1e-6 * grad_scale(i)) << i;
    EXPECT_NEAR(got.v[i], v, 1e-6 * grad_scale(i) * grad_scale(i)) << i;
  }
}

// The fp32 formula of adamw.h evaluated one element at a time: equal bit for bit, in the vector
// body and in the tail alike.
TEST_P(AdamWSizeTest, EqualsScalarFp32FormulaBitForBit) {
  const size_t n = GetParam();
  AdamWState got = run_adamw(n, kGptAdamW, {});
  const AdamWConfig& c = kGptAdamW;
  for (size_t i = 0; i < n; ++i) {
    float p = p0_at(i), m = 0, v = 0;
    for (int t = 1; t <= kSteps; ++t) {
      const double lr = lr_of_step(t), b1 = c.beta1, b2 = c.beta2;
      const float decay = static_cast<float>(1.0 - lr * static_cast<double>(c.weight_decay));
      const float bc2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(b2, t)));
      const float neg_step = static_cast<float>(-(lr / (1.0 - std::pow(b1, t))));
      const float g = grad_at(i, t);
      p = p * decay;
      m = c.beta1 * m + static_cast<float>(1.0 - b1) * g;
      v = c.beta2 * v + (static_cast<float>(1.0 - b2) * g) * g;
      const float denom = std::sqrt(v) / bc2_sqrt + c.eps;
      p = p + (neg_step * m) / denom;
    }
    ASSERT_EQ(std::bit_cast<uint32_t>(got.p[i]), std::bit_cast<uint32_t>(p)) << i;
    ASSERT_EQ(std::bit_cast<uint32_t>(got.m[i]), std::bit_cast<uint32_t>(m)) << i;
    ASSERT_EQ(std::bit_cast<uint32_t>(got.v[i]), std::bit_cast<uint32_t>(v)) << i;
  }
}

// A shard that updates [offset, offset + k) with ranges_in_shard(no_decay) gives exactly the
// whole buffer's values there.
TEST_P(AdamWSizeTest, ShardsEqualTheWholeBitForBit) {
  const size_t n = GetParam();
  const std::vector<ParamRange> model_no_decay = {{n / 5, n / 3}, {n / 2, std::min(n, n / 2 + 3)}};
  ASSERT_TRUE(validate_ranges(model_no_decay, n).ok());
  AdamWState whole = run_adamw(n, kGptAdamW, model_no_decay);
  AdamWState sharded{initial_params(n), std::vector<float>(n), std::vector<float>(n)};
  const size_t cuts[] = {0, n / 7, std::min(n, n / 3 + 1), n};
  for (int t = 1; t <= kSteps; ++t) {
    std::vector<float> g = grads_of_step(n, t);
    for (size_t s = 0; s + 1 < std::size(cuts); ++s) {
      const size_t offset = cuts[s], len = cuts[s + 1] - cuts[s];
      std::vector<ParamRange> local = ranges_in_shard(model_no_decay, offset, len);
      adamw_update(sharded.p.data() + offset, g.data() + offset, sharded.m.data() + offset,
                   sharded.v.data() + offset, len, kGptAdamW, lr_of_step(t), t, local);
    }
  }
  EXPECT_EQ(sharded.p, whole.p);
  EXPECT_EQ(sharded.m, whole.m);
  EXPECT_EQ(sharded.v, whole.v);
}

// adamw_update_parallel splits the buffer over threads: the same bits as one thread, with
// no-decay ranges that straddle the threads' boundaries.
TEST(AdamWTest, ParallelEqualsOneThreadBitForBit) {
  const size_t n = 100003;  // above the size that it runs on one thread
  const std::vector<ParamRange> model_no_decay = {{7, 40000}, {n / 2 - 5, n / 2 + 5}, {n - 3, n}};
  AdamWState whole = run_adamw(n, kGptAdamW, model_no_decay);
  for (int threads : {2, 3}) {
    AdamWState split{initial_params(n), std::vector<float>(n), std::vector<float>(n)};
    for (int t = 1; t <= kSteps; ++t) {
      std::vector<float> g = grads_of_step(n, t);
      adamw_update_parallel(split.p.data(), g.data(), split.m.data(), split.v.data(), n, kGptAdamW,
                            lr_of_step(t), t, model_no_decay, threads);
    }
    EXPECT_EQ(split.p, whole.p) << threads;
    EXPECT_EQ(split.m, whole.m) << threads;
    EXPECT_EQ(split.v, whole.v) << threads;
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes, AdamWSizeTest, ::testing::Values(0, 1, 3, 4, 5, 8, 17, 1000, 4099));

// torch.optim.AdamW: params [0, 4) in a weight_decay 0 group. PyTorch's AVX2 kernels fuse the
// moment updates (adamw.h), hence the few-ulp tolerance.
TEST(AdamWTest, MatchesPyTorch) {
  const ParamRange no_decay[] = {{0, 4}};
  AdamWState got = run_adamw(ref::kN, kGptAdamW, no_decay);
  expect_within_ulps(got.p, ref::kTorchAdamWParams, 2, "AdamW params");
  expect_within_ulps(got.m, ref::kTorchAdamWExpAvg, 2, "AdamW exp_avg");
  expect_within_ulps(got.v, ref::kTorchAdamWExpAvgSq, 2, "AdamW exp_avg_sq");
}

// Step 1 from zero state moves every parameter with a nonzero gradient by lr against its sign
// (mhat / sqrt(vhat) = g / |g|), less the eps and weight decay terms.
TEST(AdamWTest, FirstStepIsSignedLr) {
  std::vector<float> p = {1, 1, 1, 1}, g = {3, -0.5f, 0, 1e-3f}, m(4), v(4);
  adamw_update(p.data(), g.data(), m.data(), v.data(), 4, {.beta2 = 0.95f}, 0.1f, 1);
  EXPECT_NEAR(p[0], 0.9f, 1e-6);
  EXPECT_NEAR(p[1], 1.1f, 1e-6);
  EXPECT_EQ(p[2], 1.0f);
  EXPECT_NEAR(p[3], 0.9f, 1e-5);
}

TEST(AdamWTest, ValidateNamesTheField) {
  EXPECT_TRUE(validate(kGptAdamW).ok());
  absl::Status s = validate(AdamWConfig{.beta2 = 1.0f});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("beta2"), std::string_view::npos) << s;
  EXPECT_FALSE(validate(AdamWConfig{.lr = -1}).ok());
  EXPECT_FALSE(validate(AdamWConfig{.eps = NAN}).ok());
  EXPECT_FALSE(validate(AdamWConfig{.weight_decay = -0.1f}).ok());
}

TEST(ParamRangeTest, ValidateAndCutToShard) {
  const std::vector<ParamRange> r = {{2, 5}, {5, 9}, {12, 20}};
  EXPECT_TRUE(validate_ranges(r, 20).ok());
  EXPECT_FALSE(validate_ranges(r, 19).ok());
  EXPECT_FALSE(validate_ranges(std::vector<ParamRange>{{4, 6}, {5, 7}}, 10).ok());
  EXPECT_FALSE(validate_ranges(std::vector<ParamRange>{{6, 4}}, 10).ok());
  EXPECT_EQ(ranges_in_shard(r, 4, 10), (std::vector<ParamRange>{{0, 1}, {1, 5}, {8, 10}}));
  EXPECT_EQ(ranges_in_shard(r, 9, 3), std::vector<ParamRange>{});
  EXPECT_EQ(ranges_in_shard(r, 0, 20), r);
}

// ---- SGD ----

std::vector<float> run_sgd(const SgdConfig& c, std::vector<float>& buffer, size_t n) {
  std::vector<float> p = initial_params(n);
  buffer.assign(n, 12345.0f);  // ignored at step 1
  for (int t = 1; t <= kSteps; ++t) {
    std::vector<float> g = grads_of_step(n, t);
    sgd_update(p.data(), g.data(), buffer.data(), n, c, c.lr, t);
  }
  return p;
}

constexpr SgdConfig kSgd = {
    .lr = 0.05f, .momentum = 0.9f, .dampening = 0.1f, .weight_decay = 0.01f};
constexpr SgdConfig kNesterov = {
    .lr = 0.05f, .momentum = 0.9f, .weight_decay = 0.01f, .nesterov = true};

TEST(SgdTest, MatchesPyTorch) {
  std::vector<float> buffer;
  std::vector<float> p = run_sgd(kSgd, buffer, ref::kN);
  expect_within_ulps(p, ref::kTorchSgdParams, 4, "SGD params");
  expect_within_ulps(buffer, ref::kTorchSgdMomentum, 4, "SGD momentum_buffer");
  p = run_sgd(kNesterov, buffer, ref::kN);
  expect_within_ulps(p, ref::kTorchNesterovParams, 4, "SGD nesterov params");
  expect_within_ulps(buffer, ref::kTorchNesterovMomentum, 4, "SGD nesterov momentum_buffer");
}

TEST(SgdTest, MatchesFp64ReferenceAcrossSizes) {
  for (const SgdConfig& c : {kSgd, kNesterov, SgdConfig{.lr = 0.05f, .weight_decay = 0.01f}}) {
    for (size_t n : {1, 5, 17, 1001}) {
      std::vector<float> buffer;
      std::vector<float> got = run_sgd(c, buffer, n);
      for (size_t i = 0; i < n; ++i) {
        double p = p0_at(i), b = 0;
        const double mu = c.momentum, damp = c.dampening, wd = c.weight_decay;
        for (int t = 1; t <= kSteps; ++t) {
          double d = grad_at(i, t) + wd * p;
          if (mu != 0) {
            b = t == 1 ? d : mu * b + (1 - damp) * d;
            d = c.nesterov ? d + mu * b : b;
          }
          p -= static_cast<double>(c.lr) * d;
        }
        EXPECT_NEAR(got[i], p, 2e-6 * std::max(1.0, std::fabs(p))) << n << " " << i;
      }
    }
  }
}

TEST(SgdTest, ValidateRejectsNesterovWithoutMomentum) {
  EXPECT_TRUE(validate(kSgd).ok());
  EXPECT_TRUE(validate(kNesterov).ok());
  EXPECT_FALSE(validate(SgdConfig{.nesterov = true}).ok());
  EXPECT_FALSE(validate(SgdConfig{.momentum = 0.9f, .dampening = 0.1f, .nesterov = true}).ok());
  EXPECT_FALSE(validate(SgdConfig{.momentum = -0.9f}).ok());
}

// ---- Schedules: DeepSpeed's, update k at last_batch_iteration k - 2 ----

TEST(ScheduleTest, ConstantIsConstant) {
  LrSchedule s = LrSchedule::constant(3e-4f);
  for (int step : {1, 2, 1000})
    EXPECT_EQ(s.lr_at(step), 3e-4f);
}

TEST(ScheduleTest, WarmupDecayLinearBoundaries) {
  absl::StatusOr<LrSchedule> s = LrSchedule::warmup_decay({.total_num_steps = 100,
                                                           .warmup_min_lr = 0.1f,
                                                           .warmup_max_lr = 1.1f,
                                                           .warmup_num_steps = 10,
                                                           .warmup_type = WarmupType::kLinear});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_FLOAT_EQ(s->lr_at(1), 0.1f);    // pre-start: warmup_min_lr
  EXPECT_FLOAT_EQ(s->lr_at(2), 0.1f);    // iteration 0: w = 0
  EXPECT_FLOAT_EQ(s->lr_at(3), 0.2f);    // iteration 1: w = 1/10
  EXPECT_FLOAT_EQ(s->lr_at(11), 1.0f);   // iteration 9, the last of the warmup: w = 9/10
  EXPECT_FLOAT_EQ(s->lr_at(12), 1.1f);   // iteration 10: decay starts at gamma (100-10)/90 = 1
  EXPECT_FLOAT_EQ(s->lr_at(57), 0.6f);   // iteration 55: gamma 45/90
  EXPECT_FLOAT_EQ(s->lr_at(102), 0.1f);  // iteration 100 = total: warmup_min_lr
  EXPECT_FLOAT_EQ(s->lr_at(500), 0.1f);  // and held there
  EXPECT_EQ(s->lr_at_iteration(55), s->lr_at(57));
}

TEST(ScheduleTest, LogWarmupReachesMaxAtItsLastStep) {
  absl::StatusOr<LrSchedule> s =
      LrSchedule::warmup({.warmup_max_lr = 1.0f, .warmup_num_steps = 10});
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->lr_at(2), 0.0f);
  EXPECT_FLOAT_EQ(s->lr_at(5), static_cast<float>(std::log(4.0) / std::log(10.0)));  // iteration 3
  EXPECT_FLOAT_EQ(s->lr_at(11), 1.0f);  // iteration 9: log(10) / log(10)
  EXPECT_FLOAT_EQ(s->lr_at(1000), 1.0f);
  // DeepSpeed clamps the warmup to >= 2 steps.
  absl::StatusOr<LrSchedule> one = LrSchedule::warmup(
      {.warmup_max_lr = 1.0f, .warmup_num_steps = 1, .warmup_type = WarmupType::kLinear});
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->lr_at(2), 0.0f);
  EXPECT_EQ(one->lr_at(3), 0.5f);
  EXPECT_EQ(one->lr_at(4), 1.0f);
}

TEST(ScheduleTest, WarmupCosineBoundaries) {
  const float c = 0.01f, r0 = 0.1f;
  absl::StatusOr<LrSchedule> s = LrSchedule::warmup_cosine({.base_lr = 2.0f,
                                                            .total_num_steps = 110,
                                                            .warmup_min_ratio = r0,
                                                            .warmup_num_steps = 10,
                                                            .cos_min_ratio = c,
                                                            .warmup_type = WarmupType::kLinear});
  ASSERT_TRUE(s.ok()) << s.status();
  auto cosine = [&](double progress) {
    return static_cast<float>(2.0 *
                              (c + (1 - c) * (1 + std::cos(std::numbers::pi * progress)) / 2));
  };
  EXPECT_EQ(s->lr_at(1), 0.0f);                                 // pre-start: 0 for this schedule
  EXPECT_FLOAT_EQ(s->lr_at(2), 2.0f * r0);                      // iteration 0
  EXPECT_FLOAT_EQ(s->lr_at(7), 2.0f * (r0 + 0.5f * (1 - r0)));  // iteration 5
  EXPECT_FLOAT_EQ(s->lr_at(12), cosine(1.0 / 100));  // iteration 10 = W: already 1 step in
  EXPECT_FLOAT_EQ(s->lr_at(61), cosine(0.5));        // iteration 59
  EXPECT_FLOAT_EQ(s->lr_at(111), 2.0f * c);          // iteration 109 = T - 1: the floor
  EXPECT_FLOAT_EQ(s->lr_at(1000), 2.0f * c);         // held (the cosine does not come back up)
}

TEST(ScheduleTest, RejectsBadConfigs) {
  EXPECT_FALSE(LrSchedule::warmup({.warmup_num_steps = 0}).ok());
  EXPECT_FALSE(LrSchedule::warmup_decay({.total_num_steps = -1}).ok());
  absl::StatusOr<LrSchedule> s = LrSchedule::warmup_cosine({.base_lr = -1});
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("base_lr"), std::string_view::npos) << s.status();
}

// ---- Clipping ----

TEST(ClipTest, NormCoefficientAndNoOpBelowMax) {
  const std::vector<float> a = {3, 0}, b = {0, 0, 4};
  const std::span<const float> buffers[] = {a, b};
  const double sq = grad_norm_squared(buffers);
  EXPECT_EQ(sq, 25.0);
  absl::StatusOr<GradClip> clip = clip_coefficient(sq, 1.0f);
  ASSERT_TRUE(clip.ok());
  EXPECT_EQ(clip->norm, 5.0);
  EXPECT_TRUE(clip->clipped);
  EXPECT_EQ(clip->coef, static_cast<float>(1.0 / (5.0 + 1e-6)));
  clip = clip_coefficient(sq, 10.0f);
  ASSERT_TRUE(clip.ok());
  EXPECT_FALSE(clip->clipped);
  EXPECT_EQ(clip->coef, 1.0f);
  clip = clip_coefficient(sq, 0.0f);  // clipping off
  ASSERT_TRUE(clip.ok());
  EXPECT_EQ(clip->coef, 1.0f);
}

TEST(ClipTest, MatchesPyTorch) {
  std::vector<float> g = grads_of_step(ref::kN, 1);
  const double sq = grad_norm_squared(g.data(), g.size());
  absl::StatusOr<GradClip> clip = clip_coefficient(sq, 1.0f);
  ASSERT_TRUE(clip.ok());
  EXPECT_LE(ulp_distance(static_cast<float>(clip->norm), ref::kTorchClipNorm), 1);
  scale_grads(g.data(), g.size(), clip->coef);
  expect_within_ulps(g, ref::kTorchClipGrads, 1, "clipped gradients");
}

TEST(ClipTest, ShardPartialsSumToTheWholeAndRepeat) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1e-2f);
  std::vector<float> g(1'000'003);
  for (float& x : g)
    x = normal(rng) * (rng() % 100 == 0 ? 1e3f : 1.0f);
  const double whole = grad_norm_squared(g.data(), g.size());
  EXPECT_EQ(std::bit_cast<uint64_t>(whole),
            std::bit_cast<uint64_t>(grad_norm_squared(g.data(), g.size())));
  long double exact = 0;
  for (float x : g)
    exact += static_cast<long double>(x) * x;
  EXPECT_NEAR(whole, static_cast<double>(exact), 1e-13 * whole);
  for (size_t shards : {2, 3, 7, 64}) {
    double sum = 0;
    for (size_t s = 0; s < shards; ++s) {
      const size_t begin = g.size() * s / shards, end = g.size() * (s + 1) / shards;
      sum += grad_norm_squared(g.data() + begin, end - begin);
    }
    EXPECT_NEAR(sum, whole, 1e-14 * whole) << shards;
    EXPECT_EQ(static_cast<float>(std::sqrt(sum)), static_cast<float>(std::sqrt(whole))) << shards;
  }
}

TEST(ClipTest, NonFiniteNormIsAnError) {
  for (float bad : {INFINITY, -INFINITY, NAN}) {
    std::vector<float> g(37, 1.0f);
    g[35] = bad;
    absl::StatusOr<GradClip> clip = clip_coefficient(grad_norm_squared(g.data(), g.size()), 1.0f);
    EXPECT_EQ(clip.status().code(), absl::StatusCode::kInvalidArgument);
  }
  EXPECT_FALSE(clip_coefficient(std::numeric_limits<double>::infinity(), 1.0f).ok());
}

// ---- Loss scaler: DeepSpeed's DynamicLossScaler, step by step ----

DynamicLossScaler make_scaler(const LossScalerConfig& c) {
  absl::StatusOr<DynamicLossScaler> s = DynamicLossScaler::create(c);
  EXPECT_TRUE(s.ok()) << s.status();
  return *std::move(s);
}

struct Expect {
  bool overflow;
  double scale_after;
  int hysteresis_after;
};

void run_sequence(DynamicLossScaler& scaler, std::span<const Expect> steps) {
  for (size_t i = 0; i < steps.size(); ++i) {
    ASSERT_TRUE(scaler.update(steps[i].overflow).ok()) << "step " << i;
    EXPECT_EQ(scaler.scale(), steps[i].scale_after) << "step " << i;
    EXPECT_EQ(scaler.hysteresis_left(), steps[i].hysteresis_after) << "step " << i;
  }
}

TEST(LossScalerTest, DefaultsAreDeepSpeeds) {
  DynamicLossScaler s = make_scaler({});
  EXPECT_EQ(s.scale(), 65536.0);
  EXPECT_EQ(s.hysteresis_left(), 2);
  EXPECT_EQ(s.state().iteration, 0);
  EXPECT_EQ(s.state().last_overflow_iteration, -1);
}

TEST(LossScalerTest, HysteresisDelaysTheDecrease) {
  DynamicLossScaler s = make_scaler({.scale_window = 4});
  const Expect steps[] = {
      {true, 65536, 1},   // it 0: first overflow uses up the hysteresis
      {false, 65536, 1},  // it 1
      {true, 32768, 1},   // it 2: hysteresis exhausted: halve
      {true, 16384, 1},   // it 3: consecutive overflows keep halving
      {false, 16384, 1},  // it 4..6: clean, (it - 3) % 4 != 0
      {false, 16384, 1}, {false, 16384, 1},
      {false, 32768, 2},  // it 7: 4th clean step since the overflow: grow, hysteresis restored
      {true, 32768, 1},   // it 8: the restored hysteresis absorbs one overflow
  };
  run_sequence(s, steps);
  EXPECT_EQ(s.state().iteration, 9);
  EXPECT_EQ(s.state().last_overflow_iteration, 8);
}

TEST(LossScalerTest, GrowsEveryWindowOfCleanSteps) {
  DynamicLossScaler s = make_scaler({.initial_scale_power = 4, .scale_window = 3});
  const Expect steps[] = {
      {false, 16, 2}, {false, 16, 2}, {false, 32, 2},  // it 2: (2 - (-1)) % 3 == 0
      {false, 32, 2}, {false, 32, 2}, {false, 64, 2},  // it 5
  };
  run_sequence(s, steps);
}

TEST(LossScalerTest, MinScaleFloorAndError) {
  DynamicLossScaler s = make_scaler({.initial_scale_power = 3, .hysteresis = 1, .min_scale = 3.0});
  const Expect steps[] = {{true, 4, 1}, {true, 3, 1}};  // 8 -> 4 -> max(2, 3)
  run_sequence(s, steps);
  const LossScalerState before = s.state();
  absl::Status error = s.update(true);  // at the floor: DeepSpeed raises
  EXPECT_EQ(error.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.state(), before);
  EXPECT_TRUE(s.update(false).ok());  // a clean step afterwards is fine

  DynamicLossScaler quiet =
      make_scaler({.initial_scale_power = 0, .hysteresis = 1, .raise_error_at_min_scale = false});
  ASSERT_TRUE(quiet.update(true).ok());
  EXPECT_EQ(quiet.scale(), 1.0);
}

TEST(LossScalerTest, ConsecutiveHysteresisResetsOnAnyCleanStep) {
  DynamicLossScaler plain = make_scaler({.scale_window = 100});
  DynamicLossScaler consecutive =
      make_scaler({.scale_window = 100, .consecutive_hysteresis = true});
  const Expect plain_steps[] = {{true, 65536, 1}, {false, 65536, 1}, {true, 32768, 1}};
  const Expect consecutive_steps[] = {{true, 65536, 1}, {false, 65536, 2}, {true, 65536, 1}};
  run_sequence(plain, plain_steps);
  run_sequence(consecutive, consecutive_steps);
}

TEST(LossScalerTest, RestoreResumesExactly) {
  DynamicLossScaler a = make_scaler({.scale_window = 4});
  for (bool overflow : {true, false, true, false, false})
    ASSERT_TRUE(a.update(overflow).ok());
  absl::StatusOr<DynamicLossScaler> b = DynamicLossScaler::restore({.scale_window = 4}, a.state());
  ASSERT_TRUE(b.ok()) << b.status();
  for (bool overflow : {false, false, true, true, false}) {
    ASSERT_TRUE(a.update(overflow).ok());
    ASSERT_TRUE(b->update(overflow).ok());
    EXPECT_EQ(a.state(), b->state());
  }
  LossScalerState bad = a.state();
  bad.hysteresis_left = 5;
  EXPECT_FALSE(DynamicLossScaler::restore({.scale_window = 4}, bad).ok());
  EXPECT_FALSE(DynamicLossScaler::create({.scale_window = 0}).ok());
  EXPECT_FALSE(DynamicLossScaler::create({.hysteresis = 0}).ok());
  EXPECT_FALSE(DynamicLossScaler::create({.min_scale = 0}).ok());
}

TEST(LossScalerTest, HasInfOrNanAnywhere) {
  for (size_t n : {1, 7, 1024, 1025, 5000}) {
    std::vector<float> g(n, 1.0f);
    g[n / 2] = std::numeric_limits<float>::max();
    g[0] = std::numeric_limits<float>::denorm_min();
    EXPECT_FALSE(has_inf_or_nan(g.data(), n)) << n;
    for (size_t at : {size_t{0}, n / 2, n - 1}) {
      for (float bad : {INFINITY, -INFINITY, NAN, -NAN}) {
        const float saved = g[at];
        g[at] = bad;
        EXPECT_TRUE(has_inf_or_nan(g.data(), n)) << n << " at " << at;
        g[at] = saved;
      }
    }
  }
  EXPECT_FALSE(has_inf_or_nan(nullptr, 0));
}

TEST(LossScalerTest, UnscaleMultipliesByTheInverse) {
  std::vector<float> g = {65536.0f, -3.0f, 0.0f};
  unscale_grads(g.data(), g.size(), 65536.0);
  EXPECT_EQ(g, (std::vector<float>{1.0f, -3.0f / 65536.0f, 0.0f}));
}

}  // namespace
}  // namespace troupe::nn
