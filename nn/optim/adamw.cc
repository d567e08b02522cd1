#include "nn/optim/adamw.h"

#include <omp.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "nn/optim/detail/float4.h"

namespace troupe::nn {
namespace {

// One element (T = float) or four (T = Float4); the formula of adamw.h.
// `decay` is 1 where weight decay is off, and p * 1 == p.
template <typename T>
inline void adamw_element(T& p, T g, T& m, T& v, const AdamWCoefficients& k, float decay) {
  p = p * decay;
  m = k.beta1 * m + k.one_minus_beta1 * g;
  v = k.beta2 * v + (k.one_minus_beta2 * g) * g;
  T denom = detail::sqrt_lanes(v) / k.bias_correction2_sqrt + k.eps;
  p = p + (k.neg_step_size * m) / denom;
}

void update_range(float* __restrict params, const float* __restrict grads, float* __restrict m,
                  float* __restrict v, size_t begin, size_t end, const AdamWCoefficients& k,
                  float decay) {
  size_t i = begin;
  for (; i + detail::kFloat4Lanes <= end; i += detail::kFloat4Lanes) {
    detail::Float4 p4 = detail::load4(params + i), m4 = detail::load4(m + i),
                   v4 = detail::load4(v + i);
    adamw_element(p4, detail::load4(grads + i), m4, v4, k, decay);
    detail::store4(params + i, p4);
    detail::store4(m + i, m4);
    detail::store4(v + i, v4);
  }
  for (; i < end; ++i)
    adamw_element(params[i], grads[i], m[i], v[i], k, decay);
}

absl::Status check_field(bool ok, const char* field, float value, const char* domain) {
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("AdamW config: ", field, " = ", value, " is outside ", domain));
}

}  // namespace

absl::Status validate(const AdamWConfig& c) {
  for (absl::Status s : {
           check_field(std::isfinite(c.lr) && c.lr >= 0, "lr", c.lr, "[0, inf)"),
           check_field(c.beta1 >= 0 && c.beta1 < 1, "beta1", c.beta1, "[0, 1)"),
           check_field(c.beta2 >= 0 && c.beta2 < 1, "beta2", c.beta2, "[0, 1)"),
           check_field(std::isfinite(c.eps) && c.eps >= 0, "eps", c.eps, "[0, inf)"),
           check_field(std::isfinite(c.weight_decay) && c.weight_decay >= 0, "weight_decay",
                       c.weight_decay, "[0, inf)"),
       }) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

void adamw_update(float* params, const float* grads, float* m, float* v, size_t n,
                  const AdamWConfig& c, float lr, int step) {
  adamw_update(params, grads, m, v, n, c, lr, step, {});
}

void adamw_update(float* params, const float* grads, float* m, float* v, size_t n,
                  const AdamWConfig& c, float lr, int step, std::span<const ParamRange> no_decay) {
  assert(step >= 1);
  const AdamWCoefficients k = adamw_coefficients(c, lr, step);
  size_t done = 0;
  for (const ParamRange& r : no_decay) {
    assert(done <= r.begin && r.begin <= r.end && r.end <= n);
    update_range(params, grads, m, v, done, r.begin, k, k.decay);
    update_range(params, grads, m, v, r.begin, r.end, k, 1.0f);
    done = r.end;
  }
  update_range(params, grads, m, v, done, n, k, k.decay);
}

void adamw_update_parallel(float* params, const float* grads, float* m, float* v, size_t n,
                           const AdamWConfig& c, float lr, int step,
                           std::span<const ParamRange> no_decay, int threads) {
  assert(threads >= 1);
  if (threads == 1 || n < (size_t{1} << 16)) {
    adamw_update(params, grads, m, v, n, c, lr, step, no_decay);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    const size_t nth = static_cast<size_t>(omp_get_num_threads());
    const size_t tid = static_cast<size_t>(omp_get_thread_num());
    const size_t blocks = (n + 15) / 16;
    const size_t begin = std::min(n, blocks * tid / nth * 16);
    const size_t end = std::min(n, blocks * (tid + 1) / nth * 16);
    const std::vector<ParamRange> mine = ranges_in_shard(no_decay, begin, end - begin);
    adamw_update(params + begin, grads + begin, m + begin, v + begin, end - begin, c, lr, step,
                 mine);
  }
}

}  // namespace troupe::nn
