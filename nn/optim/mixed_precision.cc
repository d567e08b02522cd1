#include "nn/optim/mixed_precision.h"

#include <algorithm>
#include <bit>
#include <cassert>

namespace troupe::nn {
namespace {

constexpr uint32_t kExponentMask = 0x7f800000u;  // all ones: inf or nan
// Widened a block at a time by nn::convert (vectorised), then scaled and
// checked while the block is still in L1.
constexpr size_t kBlock = 2048;

// x[i] *= multiplier over [0, n); the number of results that are inf or nan.
uint32_t scale_and_count_non_finite(float* x, size_t n, float multiplier) {
  uint32_t non_finite = 0;
  for (size_t i = 0; i < n; ++i) {
    x[i] *= multiplier;
    non_finite += (std::bit_cast<uint32_t>(x[i]) & kExponentMask) == kExponentMask;
  }
  return non_finite;
}

}  // namespace

void copy_to_half(uint16_t* dst, const float* master, size_t n, DType type) {
  assert(type != DType::kFloat32);
  convert(master, DType::kFloat32, dst, type, static_cast<int64_t>(n));
}

bool grads_to_float(float* dst, const uint16_t* src, size_t n, DType type, float multiplier) {
  assert(type != DType::kFloat32);
  uint32_t non_finite = 0;
  for (size_t begin = 0; begin < n; begin += kBlock) {
    const size_t count = std::min(kBlock, n - begin);
    convert(src + begin, type, dst + begin, DType::kFloat32, static_cast<int64_t>(count));
    non_finite += scale_and_count_non_finite(dst + begin, count, multiplier) != 0;
  }
  return non_finite == 0;
}

}  // namespace troupe::nn
