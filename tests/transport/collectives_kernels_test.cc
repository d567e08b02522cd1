// The element conversions and reduction kernels of transport/collectives,
// checked exhaustively (every 16-bit pattern, every rounding boundary) and
// against a scalar reference for every dtype x op x size.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "transport/collectives/dtype.h"
#include "transport/collectives/reduce.h"

namespace troupe::transport::testing {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// The value of a binary16 pattern from its definition, in double.
double half_value(uint16_t h) {
  const int exponent = (h >> 10) & 0x1f;
  const int mantissa = h & 0x3ff;
  const double sign = (h & 0x8000) ? -1.0 : 1.0;
  if (exponent == 0x1f) return mantissa ? std::nan("") : sign * INFINITY;
  if (exponent == 0) return sign * std::ldexp(mantissa, -24);
  return sign * std::ldexp(1024 + mantissa, exponent - 25);
}

TEST(DTypeTest, SizesAndNames) {
  EXPECT_EQ(element_size(DType::kFloat32), 4u);
  EXPECT_EQ(element_size(DType::kFloat16), 2u);
  EXPECT_EQ(element_size(DType::kBFloat16), 2u);
  EXPECT_EQ(to_string(DType::kFloat32), "float32");
  EXPECT_EQ(to_string(DType::kFloat16), "float16");
  EXPECT_EQ(to_string(DType::kBFloat16), "bfloat16");
  EXPECT_EQ(to_string(ReduceOp::kSum), "sum");
  EXPECT_EQ(to_string(ReduceOp::kAvg), "avg");
  EXPECT_EQ(to_string(ReduceOp::kMax), "max");
  EXPECT_EQ(to_string(ReduceOp::kMin), "min");
}

TEST(DTypeTest, HalfRoundTripsEveryPattern) {
  for (uint32_t i = 0; i < 65536; ++i) {
    const auto h = static_cast<uint16_t>(i);
    const float f = half_to_float(h);
    const double expected = half_value(h);
    if (std::isnan(expected)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << i;
      ASSERT_EQ(std::signbit(f), (h & 0x8000) != 0) << std::hex << i;
      const uint16_t back = float_to_half(f);
      ASSERT_EQ(back & 0x7c00, 0x7c00) << std::hex << i;
      ASSERT_NE(back & 0x3ff, 0) << "NaN must stay NaN: " << std::hex << i;
      ASSERT_EQ(back & 0x8000, h & 0x8000) << std::hex << i;
    } else {
      ASSERT_EQ(static_cast<double>(f), expected) << std::hex << i;
      ASSERT_EQ(std::signbit(f), (h & 0x8000) != 0) << std::hex << i;  // -0 too
      ASSERT_EQ(float_to_half(f), h) << std::hex << i;
    }
  }
}

TEST(DTypeTest, BFloat16RoundTripsEveryPattern) {
  for (uint32_t i = 0; i < 65536; ++i) {
    const auto b = static_cast<uint16_t>(i);
    const float f = bf16_to_float(b);
    ASSERT_EQ(std::bit_cast<uint32_t>(f), i << 16);
    if (std::isnan(f)) {
      const uint16_t back = float_to_bf16(f);
      ASSERT_TRUE(std::isnan(bf16_to_float(back))) << std::hex << i;
      ASSERT_EQ(back & 0x8000, b & 0x8000) << std::hex << i;
    } else {
      ASSERT_EQ(float_to_bf16(f), b) << std::hex << i;
    }
  }
}

// For each pair of adjacent non-negative finite values lo < hi of a 16-bit
// format (and lo = largest finite, hi = inf), the midpoint rounds to the one
// with the even pattern, and the floats just either side of it round to the
// nearer one. Checked for both signs.
template <class ToFloat, class FromFloat>
void check_rounding_boundaries(uint16_t inf_bits, ToFloat to_float, FromFloat from_float) {
  for (uint32_t lo = 0; lo < inf_bits; ++lo) {
    const uint32_t hi = lo + 1;
    // lo and hi differ by one ulp; their midpoint needs one more bit, which
    // fits in fp32. Above the largest finite, the "next" value is 2^(emax+1).
    const double lo_value = to_float(static_cast<uint16_t>(lo));
    const double hi_value = hi == inf_bits
                                ? 2.0 * lo_value - to_float(static_cast<uint16_t>(lo - 1))
                                : static_cast<double>(to_float(static_cast<uint16_t>(hi)));
    const auto mid = static_cast<float>((lo_value + hi_value) / 2);
    ASSERT_EQ(static_cast<double>(mid), (lo_value + hi_value) / 2);
    const uint32_t even = (lo % 2 == 0) ? lo : hi;
    for (const float sign : {1.0f, -1.0f}) {
      const uint32_t s = sign < 0 ? 0x8000u : 0u;
      ASSERT_EQ(from_float(sign * mid), even | s) << "tie above " << std::hex << lo;
      ASSERT_EQ(from_float(sign * std::nextafter(mid, 0.0f)), lo | s) << std::hex << lo;
      ASSERT_EQ(from_float(sign * std::nextafter(mid, kInf)), hi | s) << std::hex << lo;
    }
  }
}

TEST(DTypeTest, FloatToHalfRoundsToNearestEvenAtEveryBoundary) {
  check_rounding_boundaries(0x7c00, half_to_float, float_to_half);
}

TEST(DTypeTest, FloatToBFloat16RoundsToNearestEvenAtEveryBoundary) {
  check_rounding_boundaries(0x7f80, bf16_to_float, float_to_bf16);
}

TEST(DTypeTest, FloatToHalfNamedCases) {
  EXPECT_EQ(float_to_half(1.0f), 0x3c00);
  EXPECT_EQ(float_to_half(-2.0f), 0xc000);
  EXPECT_EQ(float_to_half(0.0f), 0x0000);
  EXPECT_EQ(float_to_half(-0.0f), 0x8000);
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to even (1.0).
  EXPECT_EQ(float_to_half(1.0f + 0x1p-11f), 0x3c00);
  // 1 + 3 * 2^-11 is halfway between 1 + 2^-10 (odd) and 1 + 2^-9: up.
  EXPECT_EQ(float_to_half(1.0f + 3 * 0x1p-11f), 0x3c02);
  EXPECT_EQ(float_to_half(65504.0f), 0x7bff);
  EXPECT_EQ(float_to_half(65519.0f), 0x7bff);
  EXPECT_EQ(float_to_half(65520.0f), 0x7c00) << "the tie above the largest half overflows";
  EXPECT_EQ(float_to_half(1e10f), 0x7c00);
  EXPECT_EQ(float_to_half(-1e10f), 0xfc00);
  EXPECT_EQ(float_to_half(kInf), 0x7c00);
  EXPECT_EQ(float_to_half(-kInf), 0xfc00);
  EXPECT_EQ(float_to_half(std::numeric_limits<float>::max()), 0x7c00);
  // Subnormals: the smallest is 2^-24; 2^-25 ties to even (zero); just above
  // it rounds up; the largest subnormal and the carry into the smallest normal.
  EXPECT_EQ(float_to_half(0x1p-24f), 0x0001);
  EXPECT_EQ(float_to_half(0x1p-25f), 0x0000);
  EXPECT_EQ(float_to_half(-0x1p-25f), 0x8000);
  EXPECT_EQ(float_to_half(std::nextafter(0x1p-25f, 1.0f)), 0x0001);
  EXPECT_EQ(float_to_half(3 * 0x1p-25f), 0x0002) << "1.5 ulp ties to even (2)";
  EXPECT_EQ(float_to_half(1023 * 0x1p-24f), 0x03ff);
  EXPECT_EQ(float_to_half(1023.5f * 0x1p-24f), 0x0400) << "ties up into the smallest normal";
  EXPECT_EQ(float_to_half(0x1p-14f), 0x0400);
  EXPECT_EQ(float_to_half(1e-30f), 0x0000);
  EXPECT_EQ(float_to_half(std::numeric_limits<float>::denorm_min()), 0x0000);
  const uint16_t nan = float_to_half(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7c00, 0x7c00);
  EXPECT_NE(nan & 0x3ff, 0);
  // A NaN whose payload lies only in the low fp32 bits must not become inf.
  const uint16_t low_nan = float_to_half(std::bit_cast<float>(0x7f800001u));
  EXPECT_TRUE(std::isnan(half_to_float(low_nan)));
}

TEST(DTypeTest, FloatToBFloat16NamedCases) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bf16(1.0f + 0x1p-8f), 0x3f80) << "tie to even (down)";
  EXPECT_EQ(float_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82) << "tie to even (up)";
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()), 0x7f80) << "overflows to inf";
  EXPECT_EQ(float_to_bf16(-kInf), 0xff80);
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::denorm_min()), 0x0000);
  const uint16_t low_nan = float_to_bf16(std::bit_cast<float>(0x7f800001u));
  EXPECT_TRUE(std::isnan(bf16_to_float(low_nan))) << "a NaN with only low payload bits";
  const uint16_t neg_nan = float_to_bf16(std::bit_cast<float>(0xffffffffu));
  EXPECT_TRUE(std::isnan(bf16_to_float(neg_nan)));
  EXPECT_EQ(neg_nan & 0x8000, 0x8000);
}

// ---------------------------------------------------------------------------
// Kernels against a scalar reference.

// A tensor of `type` held as raw bytes, with fp32 access for the reference.
struct Tensor {
  DType type;
  std::vector<uint8_t> bytes;

  Tensor(DType t, size_t count) : type(t), bytes(count * element_size(t)) {}
  size_t count() const { return bytes.size() / element_size(type); }
  void* data() { return bytes.data(); }
  const void* data() const { return bytes.data(); }

  float get(size_t i) const {
    if (type == DType::kFloat32) {
      float f;
      std::memcpy(&f, &bytes[i * 4], 4);
      return f;
    }
    uint16_t h;
    std::memcpy(&h, &bytes[i * 2], 2);
    return type == DType::kFloat16 ? half_to_float(h) : bf16_to_float(h);
  }
  // Stores `v` rounded to the type.
  void set(size_t i, float v) {
    if (type == DType::kFloat32) {
      std::memcpy(&bytes[i * 4], &v, 4);
      return;
    }
    const uint16_t h = type == DType::kFloat16 ? float_to_half(v) : float_to_bf16(v);
    std::memcpy(&bytes[i * 2], &h, 2);
  }
};

float reference_op(ReduceOp op, float a, float b) {
  if (std::isnan(a) || std::isnan(b)) {
    return op == ReduceOp::kMax || op == ReduceOp::kMin ? std::numeric_limits<float>::quiet_NaN()
                                                        : a + b;
  }
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return a + b;
    case ReduceOp::kMax:
      return a > b ? a : b;
    case ReduceOp::kMin:
      return a < b ? a : b;
  }
  return 0;
}

// Values in the type's range, with duplicates, signed zeros, and the odd
// inf and NaN.
Tensor random_tensor(DType type, size_t count, uint32_t seed, bool specials) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> value(-100.0f, 100.0f);
  Tensor t(type, count);
  for (size_t i = 0; i < count; ++i) {
    float v = value(rng);
    const uint32_t pick = rng() % 64;
    if (pick == 0) v = 0.0f;
    if (pick == 1) v = -0.0f;
    if (pick == 2) v = 1.0f;  // ties between operands
    if (specials && pick == 3) v = std::numeric_limits<float>::quiet_NaN();
    if (specials && pick == 4) v = (rng() % 2) ? kInf : -kInf;
    t.set(i, v);
  }
  return t;
}

// Same bits, with every NaN pattern counted as equal to every other.
void expect_same(const Tensor& actual, const std::vector<float>& expected,
                 const std::string& what) {
  ASSERT_EQ(actual.count(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    const float a = actual.get(i);
    if (std::isnan(expected[i])) {
      ASSERT_TRUE(std::isnan(a)) << what << " at " << i;
    } else {
      ASSERT_EQ(std::bit_cast<uint32_t>(a), std::bit_cast<uint32_t>(expected[i]))
          << what << " at " << i << ": " << a << " vs " << expected[i];
    }
  }
}

float round_to(DType type, float v) {
  switch (type) {
    case DType::kFloat32:
      return v;
    case DType::kFloat16:
      return half_to_float(float_to_half(v));
    case DType::kBFloat16:
      return bf16_to_float(float_to_bf16(v));
  }
  return v;
}

constexpr DType kTypes[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin};
constexpr size_t kSizes[] = {0, 1, 7, 100, 1003, 4096 + 5};

TEST(ReduceTest, ReduceIntoMatchesScalarReference) {
  for (DType type : kTypes) {
    for (ReduceOp op : kOps) {
      for (size_t count : kSizes) {
        const std::string what = std::string(to_string(type)) + " " + std::string(to_string(op)) +
                                 " n=" + std::to_string(count);
        Tensor dst = random_tensor(type, count, 1, /*specials=*/true);
        const Tensor src = random_tensor(type, count, 2, /*specials=*/true);
        std::vector<float> expected(count);
        for (size_t i = 0; i < count; ++i) {
          expected[i] = round_to(type, reference_op(op, dst.get(i), src.get(i)));
        }
        reduce_into(type, op, dst.data(), src.data(), count);
        expect_same(dst, expected, what);
      }
    }
  }
}

TEST(ReduceTest, MaxMinPropagateNaNFromEitherSide) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (DType type : kTypes) {
    for (ReduceOp op : {ReduceOp::kMax, ReduceOp::kMin}) {
      Tensor dst(type, 4);
      Tensor src(type, 4);
      const float d[] = {nan, 1.0f, nan, -kInf};
      const float s[] = {1.0f, nan, nan, kInf};
      for (size_t i = 0; i < 4; ++i) {
        dst.set(i, d[i]);
        src.set(i, s[i]);
      }
      reduce_into(type, op, dst.data(), src.data(), 4);
      EXPECT_TRUE(std::isnan(dst.get(0))) << to_string(type) << " " << to_string(op);
      EXPECT_TRUE(std::isnan(dst.get(1))) << to_string(type) << " " << to_string(op);
      EXPECT_TRUE(std::isnan(dst.get(2))) << to_string(type) << " " << to_string(op);
      EXPECT_EQ(dst.get(3), op == ReduceOp::kMax ? kInf : -kInf);
    }
  }
}

TEST(ReduceTest, ReduceManyMatchesInOrderFp32Accumulation) {
  for (DType type : kTypes) {
    for (ReduceOp op : kOps) {
      for (size_t count : kSizes) {
        for (size_t nsrcs : {size_t{0}, size_t{1}, size_t{2}, size_t{5}}) {
          const std::string what = std::string(to_string(type)) + " " + std::string(to_string(op)) +
                                   " n=" + std::to_string(count) + " srcs=" + std::to_string(nsrcs);
          Tensor dst = random_tensor(type, count, 10, /*specials=*/true);
          std::vector<Tensor> srcs;
          std::vector<const void*> ptrs;
          for (size_t s = 0; s < nsrcs; ++s) {
            srcs.push_back(random_tensor(type, count, static_cast<uint32_t>(11 + s), true));
          }
          for (const Tensor& s : srcs)
            ptrs.push_back(s.data());
          std::vector<float> expected(count);
          for (size_t i = 0; i < count; ++i) {
            float acc = dst.get(i);
            for (const Tensor& s : srcs)
              acc = reference_op(op, acc, s.get(i));
            expected[i] = round_to(type, acc);  // one rounding at the end
          }
          reduce_many(type, op, dst.data(), ptrs.data(), nsrcs, count);
          expect_same(dst, expected, what);
        }
      }
    }
  }
}

TEST(ReduceTest, ReduceManyIsDeterministic) {
  for (DType type : kTypes) {
    const size_t count = 5000;
    std::vector<Tensor> srcs;
    std::vector<const void*> ptrs;
    for (uint32_t s = 0; s < 8; ++s)
      srcs.push_back(random_tensor(type, count, 100 + s, false));
    for (const Tensor& s : srcs)
      ptrs.push_back(s.data());
    const Tensor initial = random_tensor(type, count, 99, false);
    Tensor first = initial;
    reduce_many(type, ReduceOp::kSum, first.data(), ptrs.data(), ptrs.size(), count);
    for (int run = 0; run < 3; ++run) {
      Tensor again = initial;
      reduce_many(type, ReduceOp::kSum, again.data(), ptrs.data(), ptrs.size(), count);
      ASSERT_EQ(again.bytes, first.bytes) << to_string(type);
    }
  }
}

// 64 addends of a quarter ulp each: rounding after every step loses every one
// of them (1 + ulp/4 rounds back to 1), one rounding at the end keeps them all.
TEST(ReduceTest, ReduceManyRoundsOnceForSixteenBitTypes) {
  struct Case {
    DType type;
    float one_ulp_at_one;
  };
  for (const Case& c : {Case{DType::kFloat16, 0x1p-10f}, Case{DType::kBFloat16, 0x1p-7f}}) {
    constexpr size_t kSources = 64;
    constexpr size_t kCount = 1003;
    const float addend = c.one_ulp_at_one / 4;
    std::vector<Tensor> srcs(kSources, Tensor(c.type, kCount));
    std::vector<const void*> ptrs;
    for (Tensor& s : srcs) {
      for (size_t i = 0; i < kCount; ++i)
        s.set(i, addend);
      ASSERT_EQ(s.get(0), addend) << "exactly representable";
      ptrs.push_back(s.data());
    }
    Tensor once(c.type, kCount);
    Tensor stepwise(c.type, kCount);
    for (size_t i = 0; i < kCount; ++i) {
      once.set(i, 1.0f);
      stepwise.set(i, 1.0f);
    }
    reduce_many(c.type, ReduceOp::kSum, once.data(), ptrs.data(), kSources, kCount);
    for (const void* p : ptrs)
      reduce_into(c.type, ReduceOp::kSum, stepwise.data(), p, kCount);
    for (size_t i = 0; i < kCount; ++i) {
      ASSERT_EQ(once.get(i), 1.0f + kSources * addend) << to_string(c.type) << " at " << i;
      ASSERT_EQ(stepwise.get(i), 1.0f) << to_string(c.type) << " at " << i;
    }
  }
}

TEST(ReduceTest, ScaleAfterAvgDividesTheSum) {
  constexpr int kRanks = 3;
  for (DType type : kTypes) {
    for (size_t count : kSizes) {
      std::vector<Tensor> ranks;
      for (int r = 0; r < kRanks; ++r) {
        ranks.push_back(random_tensor(type, count, static_cast<uint32_t>(50 + r), true));
      }
      Tensor dst = ranks[0];
      std::vector<const void*> ptrs = {ranks[1].data(), ranks[2].data()};
      reduce_many(type, ReduceOp::kAvg, dst.data(), ptrs.data(), ptrs.size(), count);
      std::vector<float> expected(count);
      for (size_t i = 0; i < count; ++i) {
        const float sum = round_to(type, ranks[0].get(i) + ranks[1].get(i) + ranks[2].get(i));
        expected[i] = round_to(type, sum * (1.0f / kRanks));
      }
      scale(type, dst.data(), count, 1.0f / kRanks);
      expect_same(dst, expected, std::string(to_string(type)) + " n=" + std::to_string(count));
    }
  }
}

TEST(ReduceTest, ScaleOfSmallValuesProducesSubnormalsAndZeros) {
  Tensor t(DType::kFloat16, 3);
  t.set(0, 0x1p-14f);  // the smallest normal half
  t.set(1, 0x1p-24f);  // the smallest subnormal
  t.set(2, -3.0f);
  scale(DType::kFloat16, t.data(), 3, 0.5f);
  EXPECT_EQ(t.get(0), 0x1p-15f);
  EXPECT_EQ(std::bit_cast<uint32_t>(t.get(1)), 0u) << "2^-25 ties to even: +0";
  EXPECT_EQ(t.get(2), -1.5f);
}

}  // namespace
}  // namespace troupe::transport::testing
