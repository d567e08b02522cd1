// nn::gemm against a naive triple loop in double: every transpose
// combination, odd sizes, padded row strides, alpha and beta, the edge cases
// (K == 0, beta == 0 over NaN), determinism for a fixed thread count, and
// calls from several threads at once.
#include "nn/gemm.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "nn/threads.h"

namespace troupe::nn {
namespace {

// A row-major rows x cols matrix inside a buffer with row stride ld = cols + pad.
struct Matrix {
  int rows, cols, ld;
  std::vector<float> data;

  Matrix(int r, int c, int pad, uint32_t seed) : rows(r), cols(c), ld(c + pad) {
    data.resize(static_cast<size_t>(std::max(1, r * ld)));
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> value(-1.0f, 1.0f);
    for (float& x : data)
      x = value(rng);
  }
  float at(int r, int c) const { return data[static_cast<size_t>(r) * ld + c]; }
};

struct Case {
  bool trans_a, trans_b;
  int M, N, K;
  float alpha, beta;
};

std::string name(const Case& c) {
  return std::string(c.trans_a ? "T" : "N") + (c.trans_b ? "T" : "N") +
         " M=" + std::to_string(c.M) + " N=" + std::to_string(c.N) + " K=" + std::to_string(c.K) +
         " alpha=" + std::to_string(c.alpha) + " beta=" + std::to_string(c.beta);
}

// Runs gemm on padded matrices and checks C (and that the padding is untouched).
void check(const Case& c, int pad) {
  // op(A) is M x K: A is stored M x K, or K x M when transposed.
  const Matrix A = c.trans_a ? Matrix(c.K, c.M, pad, 1) : Matrix(c.M, c.K, pad, 1);
  const Matrix B = c.trans_b ? Matrix(c.N, c.K, pad, 2) : Matrix(c.K, c.N, pad, 2);
  Matrix C(c.M, c.N, pad, 3);
  const Matrix C0 = C;
  gemm(c.trans_a, c.trans_b, c.M, c.N, c.K, c.alpha, A.data.data(), A.ld, B.data.data(), B.ld,
       c.beta, C.data.data(), C.ld);
  for (int i = 0; i < c.M; ++i) {
    for (int j = 0; j < C.ld; ++j) {
      if (j >= c.N) {  // padding
        ASSERT_EQ(C.at(i, j), C0.at(i, j)) << name(c) << " wrote padding at " << i << "," << j;
        continue;
      }
      double product = 0, magnitude = 0;
      for (int k = 0; k < c.K; ++k) {
        const double a = c.trans_a ? A.at(k, i) : A.at(i, k);
        const double b = c.trans_b ? B.at(j, k) : B.at(k, j);
        product += a * b;
        magnitude += std::abs(a * b);
      }
      const double expected = c.alpha * product + (c.beta == 0 ? 0.0 : c.beta * C0.at(i, j));
      const double tolerance =
          1e-6 * (c.K + 4) * (std::abs(c.alpha) * magnitude + std::abs(c.beta * C0.at(i, j))) +
          1e-12;
      ASSERT_NEAR(C.at(i, j), expected, tolerance) << name(c) << " at " << i << "," << j;
    }
  }
}

TEST(GemmTest, MatchesNaiveLoopForEveryTransposeAndOddSizes) {
  const int sizes[][3] = {{1, 1, 1},       {3, 5, 7},   {17, 33, 65}, {64, 64, 64},
                          {127, 129, 131}, {2, 300, 1}, {300, 2, 3}};
  for (bool trans_a : {false, true}) {
    for (bool trans_b : {false, true}) {
      for (const auto& s : sizes) {
        for (int pad : {0, 3}) {
          check({trans_a, trans_b, s[0], s[1], s[2], 1.0f, 0.0f}, pad);
          check({trans_a, trans_b, s[0], s[1], s[2], -0.5f, 1.0f}, pad);
          check({trans_a, trans_b, s[0], s[1], s[2], 2.0f, 0.25f}, pad);
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

TEST(GemmTest, BetaZeroOverwritesNaNAndKZeroScales) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> A(6, 1.0f), B(6, 1.0f);
  std::vector<float> C(4, nan);
  gemm(false, false, 2, 2, 3, 1.0f, A.data(), 3, B.data(), 2, 0.0f, C.data(), 2);
  EXPECT_EQ(C, std::vector<float>(4, 3.0f)) << "beta == 0 must not read C";

  C = {1, 2, 3, 4};
  gemm(false, false, 2, 2, 0, 1.0f, A.data(), 1, B.data(), 2, 0.5f, C.data(), 2);
  EXPECT_EQ(C, (std::vector<float>{0.5f, 1, 1.5f, 2})) << "K == 0: C = beta C";
  C.assign(4, nan);
  gemm(false, false, 2, 2, 0, 1.0f, A.data(), 1, B.data(), 2, 0.0f, C.data(), 2);
  EXPECT_EQ(C, std::vector<float>(4, 0.0f));
  gemm(false, false, 0, 2, 3, 1.0f, A.data(), 3, B.data(), 2, 0.0f, C.data(), 2);  // no-op
}

TEST(GemmTest, SameBitsForAFixedThreadCount) {
  const int saved = num_threads();
  constexpr int M = 256, N = 192, K = 320;
  const Matrix A(M, K, 0, 4), B(N, K, 0, 5);
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    std::vector<float> first(M * N), again(M * N);
    gemm(false, true, M, N, K, 1.0f, A.data.data(), K, B.data.data(), K, 0.0f, first.data(), N);
    for (int run = 0; run < 3; ++run) {
      gemm(false, true, M, N, K, 1.0f, A.data.data(), K, B.data.data(), K, 0.0f, again.data(), N);
      ASSERT_EQ(std::memcmp(first.data(), again.data(), first.size() * 4), 0)
          << "threads " << threads << " run " << run;
    }
  }
  set_num_threads(saved);
}

TEST(GemmTest, CallsFromSeveralThreadsAtOnce) {
  constexpr int M = 96, N = 80, K = 112;
  const Matrix A(M, K, 0, 6), B(K, N, 0, 7);
  std::vector<float> expected(M * N);
  gemm(false, false, M, N, K, 1.0f, A.data.data(), K, B.data.data(), N, 0.0f, expected.data(), N);
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::vector<float> C(M * N);
      for (int run = 0; run < 20; ++run) {
        gemm(false, false, M, N, K, 1.0f, A.data.data(), K, B.data.data(), N, 0.0f, C.data(), N);
        for (int i = 0; i < M * N; ++i)
          mismatches[t] += std::abs(C[i] - expected[i]) > 1e-4f * (1 + std::abs(expected[i]));
      }
    });
  }
  for (std::thread& t : threads)
    t.join();
  for (int t = 0; t < 4; ++t)
    EXPECT_EQ(mismatches[t], 0) << "thread " << t;
}

TEST(GemmDeathTest, BadStridesAbortNamingTheShapes) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // OpenBLAS's threads are running
  std::vector<float> A(64), B(64), C(64);
  EXPECT_DEATH(gemm(false, false, 4, 4, 8, 1, A.data(), 4, B.data(), 4, 0, C.data(), 4),
               "lda is less than A's row length: C\\[4 x 4\\] = op\\(A\\)\\[4 x 8\\]");
  EXPECT_DEATH(gemm(false, true, 4, 4, 8, 1, A.data(), 8, B.data(), 4, 0, C.data(), 4),
               "ldb is less than B's row length");
  EXPECT_DEATH(gemm(false, false, 4, 4, 2, 1, A.data(), 2, B.data(), 4, 0, C.data(), 3),
               "ldc is less than N");
  EXPECT_DEATH(gemm(false, false, -1, 4, 2, 1, A.data(), 2, B.data(), 4, 0, C.data(), 4),
               "negative dimension");
}

}  // namespace
}  // namespace troupe::nn
