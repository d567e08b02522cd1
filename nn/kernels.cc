#include "nn/kernels.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "nn/threads.h"

// The loops are written so that GCC vectorises them at -O3 (checked with
// -fopt-info-vec); each is compiled twice, for AVX2 and for the baseline,
// and the loader picks one (an ifunc). This file is built with
// -ffp-contract=off: no clone may fuse a multiply and an add.
#if defined(__x86_64__)
#define TROUPE_NN_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define TROUPE_NN_CLONES
#endif

namespace troupe::nn {
namespace {

// Below this many elements per thread a parallel region costs more than it saves.
constexpr int64_t kMinPerThread = 32768;
// Lanes of the blocked sums: 32 floats are four AVX2 vectors, enough
// independent additions in flight to hide the adder's latency.
constexpr int kLanes = 32;

// Runs body(begin, end) over [0, n) cut into one contiguous range per
// thread, each a multiple of 16 elements but the last.
template <class Body>
void parallel_ranges(int64_t n, const Body& body) {
  const int threads =
      static_cast<int>(std::min<int64_t>(num_threads(), std::max<int64_t>(1, n / kMinPerThread)));
  if (threads <= 1) {
    if (n > 0) body(int64_t{0}, n);
    return;
  }
  const int64_t per_thread = ((n + threads - 1) / threads + 15) / 16 * 16;
#pragma omp parallel num_threads(threads)
  {
    const int64_t begin = std::min(n, omp_get_thread_num() * per_thread);
    const int64_t end = std::min(n, begin + per_thread);
    if (begin < end) body(begin, end);
  }
}

TROUPE_NN_CLONES void fill_range(float* out, float value, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    out[i] = value;
}

TROUPE_NN_CLONES void add_range(float* out, const float* a, const float* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    out[i] = a[i] + b[i];
}

TROUPE_NN_CLONES void mul_range(float* out, const float* a, const float* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    out[i] = a[i] * b[i];
}

TROUPE_NN_CLONES void axpy_range(float* y, float alpha, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    y[i] += alpha * x[i];
}

TROUPE_NN_CLONES void scale_range(float* x, float alpha, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    x[i] *= alpha;
}

// Adds acc[0..width) pairwise into acc[0]: width must be a power of two.
inline float pairwise_lanes(float* acc, int width) {
  for (int w = width / 2; w >= 1; w /= 2) {
    for (int j = 0; j < w; ++j)
      acc[j] += acc[j + w];
  }
  return acc[0];
}

// The sum of one block (n <= kSumBlock): element i goes to lane i % kLanes.
TROUPE_NN_CLONES float block_sum(const float* x, int64_t n) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j)
      acc[j] += x[i + j];
  }
  for (int j = 0; i < n; ++i, ++j)
    acc[j] += x[i];
  return pairwise_lanes(acc, kLanes);
}

TROUPE_NN_CLONES float block_sum_squares(const float* x, int64_t n) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j)
      acc[j] += x[i + j] * x[i + j];
  }
  for (int j = 0; i < n; ++i, ++j)
    acc[j] += x[i] * x[i];
  return pairwise_lanes(acc, kLanes);
}

// Sums blocks [0, blocks) of x with `block_fn`, then the blocks' sums pairwise:
// at each level sums 2k and 2k + 1 are added, an odd last one carried up.
template <class BlockFn>
float blocked_sum(const float* x, int64_t n, BlockFn block_fn) {
  if (n <= 0) return 0.0f;
  const int64_t blocks = (n + kSumBlock - 1) / kSumBlock;
  if (blocks == 1) return block_fn(x, n);
  std::vector<float> partial(static_cast<size_t>(blocks));
  // Ranges of blocks per thread: parallel_ranges over blocks, scaled so
  // that its per-thread threshold still counts elements.
  const int threads = static_cast<int>(
      std::min<int64_t>({num_threads(), blocks, std::max<int64_t>(1, n / kMinPerThread)}));
  const auto run = [&](int64_t first, int64_t last) {
    for (int64_t b = first; b < last; ++b) {
      const int64_t begin = b * kSumBlock;
      partial[static_cast<size_t>(b)] = block_fn(x + begin, std::min(kSumBlock, n - begin));
    }
  };
  if (threads <= 1) {
    run(0, blocks);
  } else {
    const int64_t per_thread = (blocks + threads - 1) / threads;
#pragma omp parallel num_threads(threads)
    {
      const int64_t first = std::min(blocks, omp_get_thread_num() * per_thread);
      run(first, std::min(blocks, first + per_thread));
    }
  }
  for (int64_t count = blocks; count > 1; count = (count + 1) / 2) {
    for (int64_t k = 0; k < count / 2; ++k)
      partial[k] = partial[2 * k] + partial[2 * k + 1];
    if (count % 2 == 1) partial[count / 2] = partial[count - 1];
  }
  return partial[0];
}

}  // namespace

void fill(float* out, float value, int64_t n) {
  parallel_ranges(n,
                  [=](int64_t begin, int64_t end) { fill_range(out + begin, value, end - begin); });
}

void copy(float* out, const float* in, int64_t n) {
  parallel_ranges(n, [=](int64_t begin, int64_t end) {
    std::memcpy(out + begin, in + begin, static_cast<size_t>(end - begin) * sizeof(float));
  });
}

void add(float* out, const float* a, const float* b, int64_t n) {
  parallel_ranges(n, [=](int64_t begin, int64_t end) {
    add_range(out + begin, a + begin, b + begin, end - begin);
  });
}

void mul(float* out, const float* a, const float* b, int64_t n) {
  parallel_ranges(n, [=](int64_t begin, int64_t end) {
    mul_range(out + begin, a + begin, b + begin, end - begin);
  });
}

void axpy(float* y, float alpha, const float* x, int64_t n) {
  parallel_ranges(
      n, [=](int64_t begin, int64_t end) { axpy_range(y + begin, alpha, x + begin, end - begin); });
}

void scale(float* x, float alpha, int64_t n) {
  parallel_ranges(n,
                  [=](int64_t begin, int64_t end) { scale_range(x + begin, alpha, end - begin); });
}

float sum(const float* x, int64_t n) {
  return blocked_sum(x, n, block_sum);
}

float sum_squares(const float* x, int64_t n) {
  return blocked_sum(x, n, block_sum_squares);
}

void to_float(float* out, const uint16_t* in, DType type, int64_t n) {
  parallel_ranges(n, [=](int64_t begin, int64_t end) {
    convert(in + begin, type, out + begin, DType::kFloat32, end - begin);
  });
}

void from_float(uint16_t* out, DType type, const float* in, int64_t n) {
  parallel_ranges(n, [=](int64_t begin, int64_t end) {
    convert(in + begin, DType::kFloat32, out + begin, type, end - begin);
  });
}

}  // namespace troupe::nn
