#include "actors/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"

namespace troupe::actors {
namespace {

// splitmix64: a small portable generator, so that samples do not depend on the standard
// library's distributions.
uint64_t next_random(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// A uniform draw in [0, 1).
double uniform(uint64_t& rng) {
  return static_cast<double>(next_random(rng) >> 11) * 0x1.0p-53;
}

}  // namespace

absl::Status validate(const SamplingOptions& options) {
  if (!std::isfinite(options.temperature) || options.temperature < 0) {
    return absl::InvalidArgumentError(absl::StrCat("sampling: temperature = ", options.temperature,
                                                   " must be a finite number >= 0"));
  }
  if (options.top_k < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampling: top_k = ", options.top_k, " must be >= 0 (0: off)"));
  }
  if (!(options.top_p > 0.0f && options.top_p <= 1.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampling: top_p = ", options.top_p, " must be in (0, 1] (1: off)"));
  }
  return absl::OkStatus();
}

int32_t sample_token(const float* logits, int V, const SamplingOptions& options, uint64_t& rng) {
  const float t = options.temperature;
  if (t <= 0.0f) return static_cast<int32_t>(std::max_element(logits, logits + V) - logits);
  const float max = *std::max_element(logits, logits + V);
  const int k = options.top_k > 0 ? std::min(options.top_k, V) : V;
  if (k == V && options.top_p >= 1.0f) {
    // Every token: no ordering needed.
    std::vector<double> p(static_cast<size_t>(V));
    double sum = 0;
    for (int i = 0; i < V; ++i)
      sum += p[static_cast<size_t>(i)] = std::exp((logits[i] - max) / t);
    double u = uniform(rng) * sum;
    for (int i = 0; i < V; ++i) {
      if ((u -= p[static_cast<size_t>(i)]) < 0) return i;
    }
    return V - 1;
  }
  // The k most likely, most likely first (ties: the smaller id first).
  std::vector<int32_t> order(static_cast<size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  auto likelier = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  std::partial_sort(order.begin(), order.begin() + k, order.end(), likelier);
  std::vector<double> p(static_cast<size_t>(k));
  double sum = 0;
  for (int i = 0; i < k; ++i)
    sum += p[static_cast<size_t>(i)] = std::exp((logits[order[static_cast<size_t>(i)]] - max) / t);
  // Top-p: a token stays while the tokens before it hold less than top_p of the mass.
  int kept = k;
  if (options.top_p < 1.0f) {
    const double bound = static_cast<double>(options.top_p) * sum;
    double before = 0;
    kept = 0;
    while (kept < k && before < bound)
      before += p[static_cast<size_t>(kept++)];
    kept = std::max(kept, 1);
  }
  double mass = 0;
  for (int i = 0; i < kept; ++i)
    mass += p[static_cast<size_t>(i)];
  double u = uniform(rng) * mass;
  for (int i = 0; i < kept; ++i) {
    if ((u -= p[static_cast<size_t>(i)]) < 0) return order[static_cast<size_t>(i)];
  }
  return order[static_cast<size_t>(kept - 1)];
}

}  // namespace troupe::actors
