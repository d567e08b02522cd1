// Learning-rate schedules with DeepSpeed's semantics (deepspeed/runtime/
// lr_schedules.py: WarmupLR, WarmupDecayLR, WarmupCosineLR), so that a
// DeepSpeed `scheduler` section gives the same rate at every step.
//
// Step indexing. lr_at(step) is the rate for the step-th applied optimizer
// update (1-based, the `step` passed to adamw_update; skipped fp16 steps do
// not count). DeepSpeed builds its scheduler at last_batch_iteration = -1,
// which sets the rate of the first update, and steps it after each applied
// update, so update k runs at last_batch_iteration i = k - 2:
//
//   lr_at(1) = the pre-start rate: warmup_min_lr (WarmupLR, WarmupDecayLR),
//              0 (WarmupCosineLR)
//   lr_at(k) = f(k - 2) for k >= 2, with f below.
//
// We mirror this, quirks included, rather than the naive f(k - 1): a run
// driven by a DeepSpeed config then matches DeepSpeed update for update.
//
// f(i), with W = max(2, warmup_num_steps) (DeepSpeed's clamp), T =
// total_num_steps, and the warmup fraction
//   w(i) = log(i + 1) / log(W)   (warmup_type "log", DeepSpeed's default)
//   w(i) = i / W                 ("linear")
// so that w(0) = 0 and the warmup ends at 1 (log) or (W - 1) / W (linear):
//   WarmupLR:       i <  W: min + (max - min) w(i);  i >= W: max
//   WarmupDecayLR:  i <  W: as WarmupLR;  i >= W: min + (max - min) *
//                   max(0, (T - i) / max(1, T - W))   (min at i >= T)
//   WarmupCosineLR: ratios of base_lr (the optimizer's lr);
//                   i <  W: r0 + (1 - r0) w(i)   (r0 = warmup_min_ratio)
//                   i >= W: c + (1 - c) (1 + cos(pi * s)) / 2, with
//                   s = min(1, (i - W + 1) / max(1, T - W)), c = cos_min_ratio
//                   (the floor is reached at i = T - 1 and held after, as in
//                   current DeepSpeed; older versions let the cosine rise
//                   again past T)
// All in fp64, rounded to fp32 at the end.
#pragma once

#include <variant>

#include "absl/status/statusor.h"

namespace troupe::nn {

enum class WarmupType { kLog, kLinear };

// DeepSpeed "WarmupLR": warm up, then hold warmup_max_lr.
struct WarmupLrConfig {
  float warmup_min_lr = 0.0f;
  float warmup_max_lr = 1e-3f;
  int warmup_num_steps = 1000;
  WarmupType warmup_type = WarmupType::kLog;
};

// DeepSpeed "WarmupDecayLR": warm up, then decay linearly to warmup_min_lr
// at total_num_steps.
struct WarmupDecayLrConfig {
  int total_num_steps = 0;
  float warmup_min_lr = 0.0f;
  float warmup_max_lr = 1e-3f;
  int warmup_num_steps = 1000;
  WarmupType warmup_type = WarmupType::kLog;
};

// DeepSpeed "WarmupCosineLR": warm up from warmup_min_ratio * base_lr to
// base_lr, then cosine decay to cos_min_ratio * base_lr.
struct WarmupCosineLrConfig {
  float base_lr = 1e-3f;
  int total_num_steps = 0;
  float warmup_min_ratio = 0.0f;
  int warmup_num_steps = 1000;
  float cos_min_ratio = 1e-4f;
  WarmupType warmup_type = WarmupType::kLog;
};

class LrSchedule {
 public:
  // The same rate at every step (no DeepSpeed scheduler).
  static LrSchedule constant(float lr);
  // InvalidArgument naming the field if a rate or ratio is negative or not
  // finite, or a step count is < 1 (warmup) or < 0 (total).
  static absl::StatusOr<LrSchedule> warmup(const WarmupLrConfig& c);
  static absl::StatusOr<LrSchedule> warmup_decay(const WarmupDecayLrConfig& c);
  static absl::StatusOr<LrSchedule> warmup_cosine(const WarmupCosineLrConfig& c);

  // The rate of the step-th applied update (1-based; see above).
  // REQUIRES: step >= 1.
  float lr_at(int step) const;

  // DeepSpeed's rate at last_batch_iteration `iteration` (>= -1): what
  // DeepSpeed's get_lr() returns there; lr_at(step) = this at step - 2.
  float lr_at_iteration(int iteration) const;

 private:
  struct Constant {
    float lr;
  };
  using Config = std::variant<Constant, WarmupLrConfig, WarmupDecayLrConfig, WarmupCosineLrConfig>;
  explicit LrSchedule(Config config) : config_(config) {}

  Config config_;
};

}  // namespace troupe::nn
