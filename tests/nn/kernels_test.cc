// nn's dtype conversions and kernels. Conversions: every 16-bit pattern
// round-tripped, every rounding boundary, the named special cases, and the
// vector path against the portable one bit for bit over every fp32 pattern.
// Kernels: against scalar references at sizes around the vector width, the
// sum block and the parallel threshold, on 1..4 threads; the sums' bits the
// same across runs, thread counts and alignments.
#include "nn/kernels.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "nn/dtype.h"
#include "nn/threads.h"

namespace troupe::nn {
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

// Restores the thread count a test changed.
class ThreadCount {
 public:
  ThreadCount() : saved_(num_threads()) {}
  ~ThreadCount() { set_num_threads(saved_); }

 private:
  int saved_;
};

TEST(DTypeTest, SizesAndNames) {
  EXPECT_EQ(element_size(DType::kFloat32), 4u);
  EXPECT_EQ(element_size(DType::kBFloat16), 2u);
  EXPECT_EQ(element_size(DType::kFloat16), 2u);
  EXPECT_STREQ(to_string(DType::kFloat32), "float32");
  EXPECT_STREQ(to_string(DType::kBFloat16), "bfloat16");
  EXPECT_STREQ(to_string(DType::kFloat16), "float16");
}

// Widening is exact; narrowing the result gives the pattern back; a NaN
// comes back quiet with its sign and payload.
TEST(DTypeTest, HalfRoundTripsEveryPattern) {
  for (uint32_t i = 0; i < 65536; ++i) {
    const auto h = static_cast<uint16_t>(i);
    const float f = half_to_float(h);
    const double expected = half_value(h);
    ASSERT_EQ(std::signbit(f), (h & 0x8000) != 0) << std::hex << i;  // -0 too
    if (std::isnan(expected)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << i;
      ASSERT_EQ(std::bit_cast<uint32_t>(f) & 0x00400000u, 0x00400000u) << "quiet " << std::hex << i;
      ASSERT_EQ(float_to_half(f), h | 0x0200) << std::hex << i;
    } else {
      ASSERT_EQ(static_cast<double>(f), expected) << std::hex << i;
      ASSERT_EQ(float_to_half(f), h) << std::hex << i;
    }
  }
}

TEST(DTypeTest, BFloat16RoundTripsEveryPattern) {
  for (uint32_t i = 0; i < 65536; ++i) {
    const auto b = static_cast<uint16_t>(i);
    const float f = bf16_to_float(b);
    if ((i & 0x7fff) > 0x7f80) {  // NaN: made quiet
      ASSERT_EQ(std::bit_cast<uint32_t>(f), (i << 16) | 0x00400000u) << std::hex << i;
      ASSERT_EQ(float_to_bf16(f), b | 0x0040) << std::hex << i;
    } else {
      ASSERT_EQ(std::bit_cast<uint32_t>(f), i << 16) << std::hex << i;
      ASSERT_EQ(float_to_bf16(f), b) << std::hex << i;
    }
  }
}

// For each pair of adjacent non-negative finite values lo < hi of a 16-bit
// format (and lo = largest finite, hi = inf), the midpoint rounds to the one
// with the even pattern, and the floats just either side of it to the
// nearer one; for both signs. Returns every float it tried, for the
// vector-path test.
template <class ToFloat, class FromFloat>
std::vector<float> check_rounding_boundaries(uint16_t inf_bits, ToFloat to_float_fn,
                                             FromFloat from_float_fn) {
  std::vector<float> tried;
  for (uint32_t lo = 0; lo < inf_bits; ++lo) {
    const uint32_t hi = lo + 1;
    const double lo_value = to_float_fn(static_cast<uint16_t>(lo));
    // Past the largest finite value the "next" one is 2^(emax+1).
    const double hi_value = hi == inf_bits
                                ? 2.0 * lo_value - to_float_fn(static_cast<uint16_t>(lo - 1))
                                : static_cast<double>(to_float_fn(static_cast<uint16_t>(hi)));
    const auto mid = static_cast<float>((lo_value + hi_value) / 2);
    EXPECT_EQ(static_cast<double>(mid), (lo_value + hi_value) / 2) << "midpoint fits fp32";
    const uint32_t even = (lo % 2 == 0) ? lo : hi;
    for (const float sign : {1.0f, -1.0f}) {
      const uint32_t s = sign < 0 ? 0x8000u : 0u;
      const float below = sign * std::nextafter(mid, 0.0f);
      const float above = sign * std::nextafter(mid, kInf);
      EXPECT_EQ(from_float_fn(sign * mid), even | s) << "tie above " << std::hex << lo;
      EXPECT_EQ(from_float_fn(below), lo | s) << std::hex << lo;
      EXPECT_EQ(from_float_fn(above), hi | s) << std::hex << lo;
      if (::testing::Test::HasFailure()) return tried;
      tried.insert(tried.end(), {sign * mid, below, above});
    }
  }
  return tried;
}

TEST(DTypeTest, FloatToHalfRoundsToNearestEvenAtEveryBoundary) {
  check_rounding_boundaries(0x7c00, half_to_float, float_to_half);
}

TEST(DTypeTest, FloatToBFloat16RoundsToNearestEvenAtEveryBoundary) {
  check_rounding_boundaries(0x7f80, bf16_to_float, float_to_bf16);
}

TEST(DTypeTest, NamedCases) {
  EXPECT_EQ(float_to_half(1.0f), 0x3c00);
  EXPECT_EQ(float_to_half(-0.0f), 0x8000);
  EXPECT_EQ(float_to_half(1.0f + 0x1p-11f), 0x3c00) << "tie to even (down)";
  EXPECT_EQ(float_to_half(1.0f + 3 * 0x1p-11f), 0x3c02) << "tie to even (up)";
  EXPECT_EQ(float_to_half(65504.0f), 0x7bff);
  EXPECT_EQ(float_to_half(65519.0f), 0x7bff);
  EXPECT_EQ(float_to_half(65520.0f), 0x7c00) << "the tie above the largest half overflows";
  EXPECT_EQ(float_to_half(std::numeric_limits<float>::max()), 0x7c00);
  EXPECT_EQ(float_to_half(-kInf), 0xfc00);
  // fp16 subnormals: the smallest, a tie to zero, ties to even, the carry
  // into the smallest normal.
  EXPECT_EQ(float_to_half(0x1p-24f), 0x0001);
  EXPECT_EQ(float_to_half(0x1p-25f), 0x0000);
  EXPECT_EQ(float_to_half(-0x1p-25f), 0x8000);
  EXPECT_EQ(float_to_half(std::nextafter(0x1p-25f, 1.0f)), 0x0001);
  EXPECT_EQ(float_to_half(3 * 0x1p-25f), 0x0002);
  EXPECT_EQ(float_to_half(1023.5f * 0x1p-24f), 0x0400);
  EXPECT_EQ(half_to_float(0x0001), 0x1p-24f);
  EXPECT_EQ(half_to_float(0x03ff), 1023 * 0x1p-24f);
  EXPECT_EQ(float_to_half(std::numeric_limits<float>::denorm_min()), 0x0000);
  // A NaN whose payload lies only in the low fp32 bits stays a NaN, not inf.
  EXPECT_EQ(float_to_half(std::bit_cast<float>(0x7f800001u)), 0x7e00);
  EXPECT_EQ(float_to_bf16(std::bit_cast<float>(0x7f800001u)), 0x7fc0);
  EXPECT_EQ(float_to_bf16(std::bit_cast<float>(0xffffffffu)), 0xffff);
  EXPECT_EQ(float_to_bf16(1.0f + 0x1p-8f), 0x3f80) << "tie to even (down)";
  EXPECT_EQ(float_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82) << "tie to even (up)";
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()), 0x7f80) << "overflows to inf";
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(bf16_to_float(0x0001), std::bit_cast<float>(0x00010000u)) << "bf16 subnormal";
}

// convert() through one path against the scalar functions, at odd offsets
// and lengths (vector body and scalar tail).
using ConvertFn = void (*)(const void*, DType, void*, DType, int64_t);

void expect_matches_scalar(ConvertFn fn, const std::vector<float>& floats,
                           const std::vector<uint16_t>& bits, const char* path) {
  for (DType type : {DType::kBFloat16, DType::kFloat16}) {
    const auto narrow = type == DType::kFloat16 ? float_to_half : float_to_bf16;
    const auto widen = type == DType::kFloat16 ? half_to_float : bf16_to_float;
    for (size_t offset : {size_t{0}, size_t{1}, size_t{7}}) {
      const int64_t n = static_cast<int64_t>(floats.size() - offset);
      std::vector<uint16_t> narrowed(floats.size());
      fn(floats.data() + offset, DType::kFloat32, narrowed.data() + offset, type, n);
      for (size_t i = offset; i < floats.size(); ++i) {
        ASSERT_EQ(narrowed[i], narrow(floats[i])) << path << " " << to_string(type) << " from 0x"
                                                  << std::hex << std::bit_cast<uint32_t>(floats[i]);
      }
      const int64_t m = static_cast<int64_t>(bits.size() - offset);
      std::vector<float> widened(bits.size());
      fn(bits.data() + offset, type, widened.data() + offset, DType::kFloat32, m);
      for (size_t i = offset; i < bits.size(); ++i) {
        ASSERT_EQ(std::bit_cast<uint32_t>(widened[i]), std::bit_cast<uint32_t>(widen(bits[i])))
            << path << " " << to_string(type) << " 0x" << std::hex << bits[i];
      }
    }
  }
  // 16-bit to 16-bit: through fp32, one rounding.
  std::vector<uint16_t> half(bits.size());
  fn(bits.data(), DType::kBFloat16, half.data(), DType::kFloat16,
     static_cast<int64_t>(bits.size()));
  for (size_t i = 0; i < bits.size(); ++i)
    ASSERT_EQ(half[i], float_to_half(bf16_to_float(bits[i]))) << path << " bf16->fp16";
}

TEST(DTypeTest, BothPathsMatchTheScalarConversions) {
  std::vector<uint16_t> bits(65536 + 13);
  for (size_t i = 0; i < bits.size(); ++i)
    bits[i] = static_cast<uint16_t>(i);
  std::vector<float> floats = check_rounding_boundaries(0x7c00, half_to_float, float_to_half);
  const std::vector<float> bf16 = check_rounding_boundaries(0x7f80, bf16_to_float, float_to_bf16);
  floats.insert(floats.end(), bf16.begin(), bf16.end());
  std::mt19937 rng(7);
  for (int i = 0; i < 200000; ++i)
    floats.push_back(std::bit_cast<float>(static_cast<uint32_t>(rng())));
  for (uint32_t special : {0x7f800000u, 0xff800000u, 0x7f800001u, 0xffbfffffu, 0x7fc00000u,
                           0x00000001u, 0x80000000u, 0x387fffffu, 0x477ff000u, 0x477fefffu}) {
    floats.push_back(std::bit_cast<float>(special));
  }
  expect_matches_scalar(detail::convert_portable, floats, bits, "portable");
  expect_matches_scalar(convert, floats, bits, "dispatched");
  if (!detail::has_avx2_f16c()) GTEST_SKIP() << "no AVX2 and F16C on this CPU: portable only";
  expect_matches_scalar(detail::convert_avx2, floats, bits, "avx2");
}

// fp32 patterns through the AVX2 path and the portable one, in two threads,
// 65536 consecutive patterns (all of the low 16 bits, where rounding happens)
// at a time: every 16th such run by default, which still covers every sign
// and exponent 8 times over; all 2^32 with TROUPE_NN_EXHAUSTIVE=1 (~20 s).
TEST(DTypeTest, VectorPathMatchesPortableOnFp32Patterns) {
  if (!detail::has_avx2_f16c()) GTEST_SKIP() << "no AVX2 and F16C on this CPU";
  constexpr uint64_t kChunk = 1 << 16;
  const char* exhaustive = std::getenv("TROUPE_NN_EXHAUSTIVE");
  const uint64_t stride = exhaustive != nullptr && std::string(exhaustive) == "1" ? 1 : 16;
  auto check = [](uint64_t first_chunk, uint64_t step, int* mismatches) {
    std::vector<uint32_t> in(kChunk);
    std::vector<uint16_t> vec(kChunk), ref(kChunk);
    for (uint64_t c = first_chunk; c < (uint64_t{1} << 32) / kChunk; c += step) {
      for (uint64_t i = 0; i < kChunk; ++i)
        in[i] = static_cast<uint32_t>(c * kChunk + i);
      for (DType type : {DType::kBFloat16, DType::kFloat16}) {
        detail::convert_avx2(in.data(), DType::kFloat32, vec.data(), type, kChunk);
        detail::convert_portable(in.data(), DType::kFloat32, ref.data(), type, kChunk);
        if (std::memcmp(vec.data(), ref.data(), kChunk * 2) != 0) ++*mismatches;
      }
    }
  };
  int mismatches[2] = {0, 0};
  std::thread other(check, stride, 2 * stride, &mismatches[1]);
  check(0, 2 * stride, &mismatches[0]);
  other.join();
  EXPECT_EQ(mismatches[0] + mismatches[1], 0);
}

// ---------------------------------------------------------------------------
// Kernels.

// Around the vector widths (8, 32), the sum block (4096) and the parallel
// threshold (32768 elements per thread).
constexpr int64_t kSizes[] = {0, 1, 7, 31, 32, 33, 1000, 4095, 4096, 4097, 70001, 300007};

std::vector<float> random_floats(int64_t n, uint32_t seed, float lo = -4.0f, float hi = 4.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> value(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v)
    x = value(rng);
  return v;
}

void expect_bits(const std::vector<float>& actual, const std::vector<float>& expected,
                 const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t i = 0; i < expected.size(); ++i) {
    ASSERT_EQ(std::bit_cast<uint32_t>(actual[i]), std::bit_cast<uint32_t>(expected[i]))
        << what << " at " << i << ": " << actual[i] << " vs " << expected[i];
  }
}

TEST(KernelsTest, ElementwiseMatchScalarReference) {
  ThreadCount restore;
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    for (int64_t n : kSizes) {
      const std::string what = "n=" + std::to_string(n) + " threads=" + std::to_string(threads);
      const std::vector<float> a = random_floats(n, 1), b = random_floats(n, 2);
      std::vector<float> out(a.size(), -1.0f), expected(a.size());

      fill(out.data(), 2.5f, n);
      expect_bits(out, std::vector<float>(a.size(), 2.5f), "fill " + what);
      copy(out.data(), a.data(), n);
      expect_bits(out, a, "copy " + what);

      for (size_t i = 0; i < a.size(); ++i)
        expected[i] = a[i] + b[i];
      add(out.data(), a.data(), b.data(), n);
      expect_bits(out, expected, "add " + what);
      std::vector<float> in_place = a;
      add(in_place.data(), in_place.data(), b.data(), n);
      expect_bits(in_place, expected, "add in place " + what);

      for (size_t i = 0; i < a.size(); ++i)
        expected[i] = a[i] * b[i];
      mul(out.data(), a.data(), b.data(), n);
      expect_bits(out, expected, "mul " + what);

      // Unfused: the product is rounded before the add.
      const float alpha = 0.3f;
      for (size_t i = 0; i < a.size(); ++i) {
        volatile float product = alpha * b[i];
        expected[i] = a[i] + product;
      }
      std::vector<float> y = a;
      axpy(y.data(), alpha, b.data(), n);
      expect_bits(y, expected, "axpy " + what);

      for (size_t i = 0; i < a.size(); ++i)
        expected[i] = a[i] * -1.7f;
      y = a;
      scale(y.data(), -1.7f, n);
      expect_bits(y, expected, "scale " + what);
    }
  }
}

// The documented order, written plainly: 32 lanes per block of 4096, the
// lanes and then the blocks' sums added pairwise.
float reference_blocked_sum(const std::vector<float>& x, bool squares) {
  std::vector<float> partial;
  for (size_t begin = 0; begin < x.size(); begin += kSumBlock) {
    const size_t end = std::min(x.size(), begin + static_cast<size_t>(kSumBlock));
    float lane[32] = {};
    for (size_t i = begin; i < end; ++i) {
      volatile float term = squares ? x[i] * x[i] : x[i];
      lane[(i - begin) % 32] += term;
    }
    for (int w = 16; w >= 1; w /= 2) {
      for (int j = 0; j < w; ++j)
        lane[j] += lane[j + w];
    }
    partial.push_back(lane[0]);
  }
  if (partial.empty()) return 0.0f;
  while (partial.size() > 1) {
    std::vector<float> next;
    for (size_t k = 0; k + 1 < partial.size(); k += 2)
      next.push_back(partial[k] + partial[k + 1]);
    if (partial.size() % 2 == 1) next.push_back(partial.back());
    partial = next;
  }
  return partial[0];
}

TEST(KernelsTest, SumsFollowTheDocumentedOrder) {
  ThreadCount restore;
  for (int threads : {1, 2, 4}) {
    set_num_threads(threads);
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{33}, int64_t{4097}, int64_t{70001},
                      int64_t{300007}, int64_t{1} << 20}) {
      const std::vector<float> x = random_floats(n, 3);
      const std::string what = "n=" + std::to_string(n) + " threads=" + std::to_string(threads);
      EXPECT_EQ(std::bit_cast<uint32_t>(sum(x.data(), n)),
                std::bit_cast<uint32_t>(reference_blocked_sum(x, false)))
          << what;
      EXPECT_EQ(std::bit_cast<uint32_t>(sum_squares(x.data(), n)),
                std::bit_cast<uint32_t>(reference_blocked_sum(x, true)))
          << what;
      // And close to the exact value.
      double exact = 0, exact_squares = 0, magnitude = 0;
      for (float v : x) {
        exact += v;
        exact_squares += static_cast<double>(v) * v;
        magnitude += std::abs(v);
      }
      EXPECT_NEAR(sum(x.data(), n), exact, 1e-5 * magnitude + 1e-30) << what;
      EXPECT_NEAR(sum_squares(x.data(), n), exact_squares, 1e-5 * exact_squares + 1e-30) << what;
    }
  }
}

// Same bits on every run, for every thread count, at every alignment of the
// same values.
TEST(KernelsTest, SumsAreDeterministicAcrossRunsThreadsAndAlignments) {
  ThreadCount restore;
  constexpr int64_t kN = (int64_t{1} << 20) + 123;
  const std::vector<float> x = random_floats(kN, 4, -1e3f, 1e3f);
  set_num_threads(1);
  const uint32_t expected = std::bit_cast<uint32_t>(sum(x.data(), kN));
  const uint32_t expected_squares = std::bit_cast<uint32_t>(sum_squares(x.data(), kN));
  std::vector<float> shifted(kN + 16);
  for (int threads : {1, 2, 3, 4}) {
    set_num_threads(threads);
    for (int run = 0; run < 3; ++run) {
      for (size_t offset = 0; offset < 16; offset += 3) {
        std::copy(x.begin(), x.end(), shifted.begin() + static_cast<ptrdiff_t>(offset));
        const float* p = shifted.data() + offset;
        ASSERT_EQ(std::bit_cast<uint32_t>(sum(p, kN)), expected)
            << "threads " << threads << " offset " << offset;
        ASSERT_EQ(std::bit_cast<uint32_t>(sum_squares(p, kN)), expected_squares)
            << "threads " << threads << " offset " << offset;
      }
    }
  }
}

TEST(KernelsTest, SumsPropagateInfAndNaN) {
  std::vector<float> x(10000, 1.0f);
  x[5000] = kInf;
  EXPECT_EQ(sum(x.data(), 10000), kInf);
  x[17] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(sum(x.data(), 10000)));
  EXPECT_TRUE(std::isnan(sum_squares(x.data(), 10000)));
}

TEST(KernelsTest, MixedPrecisionConversionsMatchScalar) {
  ThreadCount restore;
  constexpr int64_t kN = 200003;
  const std::vector<float> x = random_floats(kN, 5, -70000.0f, 70000.0f);
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (DType type : {DType::kBFloat16, DType::kFloat16}) {
      const auto narrow = type == DType::kFloat16 ? float_to_half : float_to_bf16;
      const auto widen = type == DType::kFloat16 ? half_to_float : bf16_to_float;
      std::vector<uint16_t> bits(kN);
      from_float(bits.data(), type, x.data(), kN);
      std::vector<float> back(kN);
      to_float(back.data(), bits.data(), type, kN);
      for (int64_t i = 0; i < kN; ++i) {
        ASSERT_EQ(bits[i], narrow(x[i])) << to_string(type) << " at " << i;
        ASSERT_EQ(std::bit_cast<uint32_t>(back[i]), std::bit_cast<uint32_t>(widen(bits[i])));
      }
    }
  }
}

TEST(ThreadsTest, SetAndGet) {
  ThreadCount restore;
  EXPECT_GE(num_threads(), 1);
  set_num_threads(3);
  EXPECT_EQ(num_threads(), 3);
  std::thread other([] { EXPECT_EQ(num_threads(), 3) << "the setting is process-wide"; });
  other.join();
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // OpenMP's threads are running
  EXPECT_DEATH(set_num_threads(0), "at least 1");
}

}  // namespace
}  // namespace troupe::nn
