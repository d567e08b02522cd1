#include "nn/optim/clip.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace troupe::nn {
namespace {

constexpr size_t kLanes = 8;

// Sum of squares of g[0, n) for n <= kNormBlock: lane j accumulates the
// elements i with i % 8 == j of each full group of eight (the compiler
// vectorises this across lanes without reordering any lane's sum); the tail
// goes to lanes 0.. in order; lanes are combined pairwise.
double block_norm_squared(const float* g, size_t n) {
  double lane[kLanes] = {};
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (size_t j = 0; j < kLanes; ++j) {
      const double x = g[i + j];
      lane[j] += x * x;
    }
  }
  for (size_t j = 0; i < n; ++i, ++j) {
    const double x = g[i];
    lane[j] += x * x;
  }
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

}  // namespace

double grad_norm_squared(const float* g, size_t n) {
  double total = 0;
  for (size_t begin = 0; begin < n; begin += kNormBlock) {
    total += block_norm_squared(g + begin, std::min(kNormBlock, n - begin));
  }
  return total;
}

double grad_norm_squared(std::span<const std::span<const float>> buffers) {
  double total = 0;
  for (std::span<const float> b : buffers)
    total += grad_norm_squared(b.data(), b.size());
  return total;
}

absl::StatusOr<GradClip> clip_coefficient(double total_norm_squared, float max_norm) {
  GradClip clip;
  clip.norm = std::sqrt(total_norm_squared);
  if (!std::isfinite(clip.norm)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gradient norm is ", clip.norm,
        ": some gradient is inf or nan (an fp16 overflow: skip this step and lower the loss "
        "scale; otherwise the step must not be applied)"));
  }
  if (max_norm > 0) {
    const double coef = static_cast<double>(max_norm) / (clip.norm + 1e-6);
    if (coef < 1.0) {
      clip.coef = static_cast<float>(coef);
      clip.clipped = true;
    }
  }
  return clip;
}

void scale_grads(float* g, size_t n, float coef) {
  for (size_t i = 0; i < n; ++i)
    g[i] *= coef;
}

}  // namespace troupe::nn
