// The element conversions and reduction kernels of transport/collectives,
// checked exhaustively (every 16-bit pattern, every rounding boundary) and
// against a scalar reference for every dtype x op x size. The kernels run
// vectorised where the CPU allows; PortableKernelsPassTheSameTests runs every
// test again with the portable kernels.
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "transport/collectives/detail/stream_copy.h"
#include "transport/collectives/dtype.h"
#include "transport/collectives/reduce.h"

extern char** environ;

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
// Around the vector width (16 elements) and the kernels' block (1024).
constexpr size_t kSizes[] = {0, 1, 7, 15, 16, 17, 33, 100, 1003, 1024, 1024 + 31, 4096 + 5};

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

// ---------------------------------------------------------------------------
// Bit-level checks of the kernels: every 16-bit pattern (for fp32, a spread
// of 65536 patterns with every exponent, NaN payloads and subnormals) against
// each of a set of special operands, for every op, one and three sources, and
// scale. Expected results come from the scalar conversions and the rules in
// reduce.h, bit for bit, NaN payloads included; the one freedom is which NaN
// a sum of two NaNs (or inf - inf) gives.

// The pattern that `type` stores for element i of a sweep.
uint32_t sweep_pattern(DType type, uint32_t i) {
  // fp32: the bf16 pattern i in the top half, low bits varying too.
  return type == DType::kFloat32 ? (i << 16) | ((i * 0x9e37u) & 0xffffu) : i;
}

float widen_bits(DType type, uint32_t bits) {
  switch (type) {
    case DType::kFloat32:
      return std::bit_cast<float>(bits);
    case DType::kFloat16:
      return half_to_float(static_cast<uint16_t>(bits));
    case DType::kBFloat16:
      return bf16_to_float(static_cast<uint16_t>(bits));
  }
  return 0;
}

uint32_t narrow_bits(DType type, float v) {
  switch (type) {
    case DType::kFloat32:
      return std::bit_cast<uint32_t>(v);
    case DType::kFloat16:
      return float_to_half(v);
    case DType::kBFloat16:
      return float_to_bf16(v);
  }
  return 0;
}

// reduce.h's rules: max/min give a if it is a NaN, else b if it is one,
// else the larger (smaller), b on a tie.
float documented_op(ReduceOp op, float a, float b) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return a + b;
    case ReduceOp::kMax:
      return (a > b || std::isnan(a)) ? a : b;
    case ReduceOp::kMin:
      return (a < b || std::isnan(a)) ? a : b;
  }
  return 0;
}

// A tensor of raw patterns.
struct Patterns {
  DType type;
  std::vector<uint8_t> bytes;

  Patterns(DType t, size_t count) : type(t), bytes(count * element_size(t)) {}
  void* data() { return bytes.data(); }
  const void* data() const { return bytes.data(); }
  uint32_t get(size_t i) const {
    if (type == DType::kFloat32) {
      uint32_t v;
      std::memcpy(&v, &bytes[i * 4], 4);
      return v;
    }
    uint16_t v;
    std::memcpy(&v, &bytes[i * 2], 2);
    return v;
  }
  void set(size_t i, uint32_t v) {
    if (type == DType::kFloat32) {
      std::memcpy(&bytes[i * 4], &v, 4);
      return;
    }
    const auto h = static_cast<uint16_t>(v);
    std::memcpy(&bytes[i * 2], &h, 2);
  }
};

// Special operands, as patterns of each type: zeros, ones, the smallest
// subnormal and the largest finite value, infinities, quiet and signalling
// NaNs with payloads.
std::vector<uint32_t> special_patterns(DType type) {
  switch (type) {
    case DType::kFloat32:
      return {0x00000000, 0x80000000, 0x3f800000, 0xbf800000, 0x00000001, 0x80000001, 0x7f7fffff,
              0xff7fffff, 0x7f800000, 0xff800000, 0x7fc01234, 0xffa00001, 0x7f800001, 0x40490fdb};
    case DType::kFloat16:
      return {0x0000, 0x8000, 0x3c00, 0xbc00, 0x0001, 0x8001, 0x7bff,
              0xfbff, 0x7c00, 0xfc00, 0x7e12, 0xfd01, 0x7c01, 0x4248};
    case DType::kBFloat16:
      return {0x0000, 0x8000, 0x3f80, 0xbf80, 0x0001, 0x8001, 0x7f7f,
              0xff7f, 0x7f80, 0xff80, 0x7fc3, 0xffa1, 0x7f81, 0x4049};
  }
  return {};
}

// 65536 sweep patterns, and five more for a tail past the vector width.
constexpr size_t kSweepCount = 65536 + 5;

void expect_bits(const Patterns& actual, size_t i, uint32_t expected, bool any_nan,
                 const std::string& what) {
  const uint32_t got = actual.get(i);
  if (any_nan) {
    ASSERT_TRUE(std::isnan(widen_bits(actual.type, got))) << what << " at " << i;
  } else {
    ASSERT_EQ(got, expected) << what << " at " << i << std::hex << ": got 0x" << got
                             << ", expected 0x" << expected;
  }
}

TEST(ReduceTest, KernelsMatchScalarConversionsBitForBit) {
  for (DType type : kTypes) {
    Patterns sweep(type, kSweepCount);
    Patterns reversed(type, kSweepCount);
    for (size_t i = 0; i < kSweepCount; ++i) {
      sweep.set(i, sweep_pattern(type, static_cast<uint32_t>(i % 65536)));
      reversed.set(i, sweep_pattern(type, static_cast<uint32_t>(65535 - i % 65536)));
    }
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin}) {
      for (uint32_t special : special_patterns(type)) {
        Patterns constant(type, kSweepCount);
        for (size_t i = 0; i < kSweepCount; ++i)
          constant.set(i, special);
        std::ostringstream name;
        name << to_string(type) << " " << to_string(op) << " special 0x" << std::hex << special;
        // One source, with the special operand as src and as dst; then three
        // sources (the kernels' fp32 accumulator path).
        for (int variant = 0; variant < 3; ++variant) {
          Patterns dst = variant == 1 ? constant : sweep;
          std::vector<const Patterns*> srcs;
          if (variant == 0) srcs = {&constant};
          if (variant == 1) srcs = {&sweep};
          if (variant == 2) srcs = {&constant, &reversed, &sweep};
          std::vector<const void*> ptrs;
          for (const Patterns* p : srcs)
            ptrs.push_back(p->data());
          const Patterns initial = dst;
          reduce_many(type, op, dst.data(), ptrs.data(), ptrs.size(), kSweepCount);
          const std::string what = name.str() + " variant " + std::to_string(variant);
          for (size_t i = 0; i < kSweepCount; ++i) {
            float acc = widen_bits(type, initial.get(i));
            int nans = std::isnan(acc) ? 1 : 0;
            for (const Patterns* p : srcs) {
              const float operand = widen_bits(type, p->get(i));
              nans += std::isnan(operand) ? 1 : 0;
              acc = documented_op(op, acc, operand);
            }
            // Which NaN a sum gives is free unless exactly one operand is one.
            const bool any_nan = op == ReduceOp::kSum && std::isnan(acc) && nans != 1;
            expect_bits(dst, i, narrow_bits(type, acc), any_nan, what);
            if (HasFatalFailure()) return;
          }
        }
      }
    }
    // NaN factors whose payload lies in the low fp32 bits too, which
    // narrowing must drop without rounding them into the high ones.
    const float nan_factors[] = {std::bit_cast<float>(0x7fc0ffffu),
                                 std::bit_cast<float>(0xff80c001u)};
    for (float factor : {0.5f, 1.5f, -1.0f, 1.0f / 3, 1.0f + 0x1p-9f, 0x1p-10f, 0x1p10f, 0x1p-20f,
                         1e30f, 0.0f, -0.0f, kInf, nan_factors[0], nan_factors[1]}) {
      Patterns data = sweep;
      scale(type, data.data(), kSweepCount, factor);
      std::ostringstream what;
      what << to_string(type) << " scale 0x" << std::hex << std::bit_cast<uint32_t>(factor);
      for (size_t i = 0; i < kSweepCount; ++i) {
        const float x = widen_bits(type, sweep.get(i));
        const float product = x * factor;
        // A lone NaN operand's payload survives; which NaN 0 x inf or
        // NaN x NaN gives is free.
        const bool any_nan = std::isnan(product) && std::isnan(x) == std::isnan(factor);
        expect_bits(data, i, narrow_bits(type, product), any_nan, what.str());
        if (HasFatalFailure()) return;
      }
    }
  }
}

// Buffers need only their element's alignment: run every kernel at odd
// element offsets, against the same call on aligned copies.
TEST(ReduceTest, KernelsAcceptBuffersAlignedToTheirElementOnly) {
  constexpr size_t kCount = 1024 + 37;
  for (DType type : kTypes) {
    const size_t size = element_size(type);
    for (size_t offset : {size_t{1}, size_t{3}, size_t{7}}) {
      for (ReduceOp op : kOps) {
        const Tensor dst = random_tensor(type, kCount, 21, true);
        const Tensor src0 = random_tensor(type, kCount, 22, true);
        const Tensor src1 = random_tensor(type, kCount, 23, true);
        std::vector<uint8_t> dst_shifted((kCount + offset) * size);
        std::vector<uint8_t> src0_shifted((kCount + offset + 1) * size);
        std::vector<uint8_t> src1_shifted((kCount + offset + 2) * size);
        std::memcpy(dst_shifted.data() + offset * size, dst.data(), kCount * size);
        std::memcpy(src0_shifted.data() + (offset + 1) * size, src0.data(), kCount * size);
        std::memcpy(src1_shifted.data() + (offset + 2) * size, src1.data(), kCount * size);
        const void* shifted[] = {src0_shifted.data() + (offset + 1) * size,
                                 src1_shifted.data() + (offset + 2) * size};
        const void* aligned[] = {src0.data(), src1.data()};
        Tensor expected = dst;
        reduce_many(type, op, expected.data(), aligned, 2, kCount);
        scale(type, expected.data(), kCount, 0.375f);
        reduce_many(type, op, dst_shifted.data() + offset * size, shifted, 2, kCount);
        scale(type, dst_shifted.data() + offset * size, kCount, 0.375f);
        ASSERT_EQ(std::memcmp(dst_shifted.data() + offset * size, expected.data(), kCount * size),
                  0)
            << to_string(type) << " " << to_string(op) << " offset " << offset;
      }
    }
  }
}

// stream_copy(): every byte, at every alignment of either side and every
// length around its 16-byte head and 64-byte body, and nothing outside.
TEST(StreamCopyTest, CopiesEveryByteAtEveryAlignmentAndLength) {
  constexpr size_t kMost = 300;
  std::vector<std::byte> src(kMost + 64);
  for (size_t i = 0; i < src.size(); ++i)
    src[i] = static_cast<std::byte>(i * 7 + 3);
  for (size_t from = 0; from < 16; ++from) {
    for (size_t to = 0; to < 16; ++to) {
      for (size_t n = 0; n <= kMost; n += (n < 140 ? 1 : 37)) {
        std::vector<std::byte> dst(kMost + 64, std::byte{0xee});
        detail::stream_copy(dst.data() + to, src.data() + from, n);
        for (size_t i = 0; i < dst.size(); ++i) {
          const bool inside = i >= to && i < to + n;
          const std::byte want = inside ? src[i - to + from] : std::byte{0xee};
          ASSERT_EQ(dst[i], want) << "from +" << from << " to +" << to << ", " << n
                                  << " bytes: byte " << i;
        }
      }
    }
  }
}

// copy_block() takes either way by size; both give the source's bytes.
TEST(StreamCopyTest, BlocksOnEitherSideOfTheThresholdArriveWhole) {
  for (size_t n : {detail::kStreamCopyBytes - 1, detail::kStreamCopyBytes + 13}) {
    std::vector<uint32_t> src(n / 4 + 1);
    for (size_t i = 0; i < src.size(); ++i)
      src[i] = static_cast<uint32_t>(i * 2654435761u);
    std::vector<uint32_t> dst(src.size(), 0);
    detail::copy_block(dst.data(), src.data(), n);
    EXPECT_EQ(std::memcmp(dst.data(), src.data(), n), 0) << n << " bytes";
  }
}

// The vectorised kernels must not change a result: every other test in this
// file runs again in a child process with TROUPE_REDUCE_KERNELS=portable, which
// reduce.cc reads at its first call.
TEST(ReduceTest, PortableKernelsPassTheSameTests) {
  if (const char* forced = std::getenv("TROUPE_REDUCE_KERNELS"); forced != nullptr) {
    GTEST_SKIP() << "already running with TROUPE_REDUCE_KERNELS=" << forced;
  }
  std::array<char, 4096> self{};
  const ssize_t n = ::readlink("/proc/self/exe", self.data(), self.size() - 1);
  ASSERT_GT(n, 0) << "cannot find this test binary";
  // Not this test itself: ctest would read its skip in the output as ours.
  std::string filter = "--gtest_filter=DTypeTest.*:ReduceTest.*-ReduceTest.PortableKernels*";
  std::vector<char*> argv = {self.data(), filter.data(), nullptr};
  constexpr std::string_view kVariable = "TROUPE_REDUCE_KERNELS=";
  std::vector<std::string> env_strings = {std::string(kVariable) + "portable"};
  for (char** e = environ; *e != nullptr; ++e) {
    if (!std::string_view(*e).starts_with(kVariable)) env_strings.push_back(*e);
  }
  std::vector<char*> envp;
  for (std::string& e : env_strings)
    envp.push_back(e.data());
  envp.push_back(nullptr);
  pid_t pid = 0;
  ASSERT_EQ(posix_spawn(&pid, self.data(), nullptr, nullptr, argv.data(), envp.data()), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "the portable run died; its output is above";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the portable kernels failed; their output is above";
}

}  // namespace
}  // namespace troupe::transport::testing
