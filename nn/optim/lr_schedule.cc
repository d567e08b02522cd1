#include "nn/optim/lr_schedule.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <numbers>

#include "absl/strings/str_cat.h"

namespace troupe::nn {
namespace {

absl::Status check_rate(const char* schedule, const char* field, float value) {
  if (std::isfinite(value) && value >= 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(schedule, ": ", field, " = ", value, " must be finite and >= 0"));
}

absl::Status check_steps(const char* schedule, const char* field, int value, int min) {
  if (value >= min) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(schedule, ": ", field, " = ", value, " must be >= ", min));
}

absl::Status first_error(std::initializer_list<absl::Status> checks) {
  for (const absl::Status& s : checks) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

// DeepSpeed clamps the warmup length to at least 2 (log(1) would be 0).
int warmup_steps(int warmup_num_steps) {
  return std::max(2, warmup_num_steps);
}

// The warmup fraction w(i) of schedule.h, for 0 <= i < W.
double warmup_fraction(int i, int warmup, WarmupType type) {
  if (type == WarmupType::kLog) {
    const double inverse_log_warmup = 1.0 / std::log(static_cast<double>(warmup));  // as DeepSpeed
    return inverse_log_warmup * std::log(i + 1.0);
  }
  return static_cast<double>(i) / warmup;
}

// DeepSpeed's WarmupLR/WarmupDecayLR gamma after the warmup.
double hold_gamma(const WarmupLrConfig&, int) {
  return 1.0;
}

double hold_gamma(const WarmupDecayLrConfig& c, int i) {
  const int warmup = warmup_steps(c.warmup_num_steps);
  const double remaining = static_cast<double>(c.total_num_steps) - i;
  return std::max(0.0, remaining / std::max(1.0, static_cast<double>(c.total_num_steps) - warmup));
}

template <typename C>
double warmup_then(const C& c, int i) {
  const double min = c.warmup_min_lr, delta = static_cast<double>(c.warmup_max_lr) - min;
  if (i < 0) return min;  // the pre-start rate
  const int warmup = warmup_steps(c.warmup_num_steps);
  const double gamma = i < warmup ? warmup_fraction(i, warmup, c.warmup_type) : hold_gamma(c, i);
  return min + delta * gamma;
}

double cosine(const WarmupCosineLrConfig& c, int i) {
  if (i < 0) return 0.0;  // DeepSpeed's pre-start rate for this schedule
  const int warmup = warmup_steps(c.warmup_num_steps);
  double ratio;
  if (i < warmup) {
    const double r0 = c.warmup_min_ratio;
    ratio = r0 + warmup_fraction(i, warmup, c.warmup_type) * (1.0 - r0);
  } else {
    const double decay_steps = std::max(1, c.total_num_steps - warmup);
    const double progress = std::min(1.0, (i - warmup + 1) / decay_steps);
    const double floor = c.cos_min_ratio;
    const double wave = (1.0 + std::cos(std::numbers::pi * progress)) / 2.0;
    ratio = std::max(0.0, floor + (1.0 - floor) * wave);
  }
  return static_cast<double>(c.base_lr) * ratio;
}

}  // namespace

LrSchedule LrSchedule::constant(float lr) {
  return LrSchedule(Constant{lr});
}

absl::StatusOr<LrSchedule> LrSchedule::warmup(const WarmupLrConfig& c) {
  constexpr const char* kName = "WarmupLR";
  absl::Status s = first_error({check_rate(kName, "warmup_min_lr", c.warmup_min_lr),
                                check_rate(kName, "warmup_max_lr", c.warmup_max_lr),
                                check_steps(kName, "warmup_num_steps", c.warmup_num_steps, 1)});
  if (!s.ok()) return s;
  return LrSchedule(c);
}

absl::StatusOr<LrSchedule> LrSchedule::warmup_decay(const WarmupDecayLrConfig& c) {
  constexpr const char* kName = "WarmupDecayLR";
  absl::Status s = first_error({check_rate(kName, "warmup_min_lr", c.warmup_min_lr),
                                check_rate(kName, "warmup_max_lr", c.warmup_max_lr),
                                check_steps(kName, "warmup_num_steps", c.warmup_num_steps, 1),
                                check_steps(kName, "total_num_steps", c.total_num_steps, 0)});
  if (!s.ok()) return s;
  return LrSchedule(c);
}

absl::StatusOr<LrSchedule> LrSchedule::warmup_cosine(const WarmupCosineLrConfig& c) {
  constexpr const char* kName = "WarmupCosineLR";
  absl::Status s = first_error({check_rate(kName, "base_lr", c.base_lr),
                                check_rate(kName, "warmup_min_ratio", c.warmup_min_ratio),
                                check_rate(kName, "cos_min_ratio", c.cos_min_ratio),
                                check_steps(kName, "warmup_num_steps", c.warmup_num_steps, 1),
                                check_steps(kName, "total_num_steps", c.total_num_steps, 0)});
  if (!s.ok()) return s;
  return LrSchedule(c);
}

float LrSchedule::lr_at(int step) const {
  assert(step >= 1);
  return lr_at_iteration(step - 2);
}

float LrSchedule::lr_at_iteration(int iteration) const {
  const int i = std::max(iteration, -1);
  const double lr = std::visit(
      [i](const auto& c) -> double {
        using C = std::decay_t<decltype(c)>;
        if constexpr (std::is_same_v<C, Constant>) {
          return c.lr;
        } else if constexpr (std::is_same_v<C, WarmupCosineLrConfig>) {
          return cosine(c, i);
        } else {
          return warmup_then(c, i);
        }
      },
      config_);
  return static_cast<float>(lr);
}

}  // namespace troupe::nn
