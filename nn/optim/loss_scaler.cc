#include "nn/optim/loss_scaler.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace troupe::nn {
namespace {

absl::Status validate(const LossScalerConfig& c) {
  if (c.scale_window < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("loss scaler: loss_scale_window = ", c.scale_window, " must be >= 1"));
  }
  if (c.hysteresis < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("loss scaler: hysteresis = ", c.hysteresis, " must be >= 1"));
  }
  if (!(std::isfinite(c.min_scale) && c.min_scale > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("loss scaler: min_loss_scale = ", c.min_scale, " must be finite and > 0"));
  }
  if (!(std::isfinite(c.scale_factor) && c.scale_factor > 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("loss scaler: scale_factor = ", c.scale_factor, " must be finite and > 1"));
  }
  if (std::abs(c.initial_scale_power) > 126) {
    return absl::InvalidArgumentError(absl::StrCat(
        "loss scaler: initial_scale_power = ", c.initial_scale_power, " must be in [-126, 126]"));
  }
  return absl::OkStatus();
}

constexpr uint32_t kExponentMask = 0x7f800000u;  // all ones: inf or nan
constexpr size_t kScanBlock = 1024;

}  // namespace

absl::StatusOr<DynamicLossScaler> DynamicLossScaler::create(const LossScalerConfig& config) {
  if (absl::Status s = validate(config); !s.ok()) return s;
  LossScalerState state;
  state.scale = std::ldexp(1.0, config.initial_scale_power);
  state.hysteresis_left = config.hysteresis;
  return DynamicLossScaler(config, state);
}

absl::StatusOr<DynamicLossScaler> DynamicLossScaler::restore(const LossScalerConfig& config,
                                                             const LossScalerState& state) {
  if (absl::Status s = validate(config); !s.ok()) return s;
  if (!(std::isfinite(state.scale) && state.scale > 0) || state.iteration < 0 ||
      state.last_overflow_iteration < -1 || state.last_overflow_iteration >= state.iteration ||
      state.hysteresis_left < 1 || state.hysteresis_left > config.hysteresis) {
    return absl::InvalidArgumentError(
        absl::StrCat("loss scaler state (scale ", state.scale, ", iteration ", state.iteration,
                     ", last overflow ", state.last_overflow_iteration, ", hysteresis left ",
                     state.hysteresis_left, ") does not fit its config (hysteresis ",
                     config.hysteresis, "): a corrupt checkpoint, or one from another config?"));
  }
  return DynamicLossScaler(config, state);
}

absl::Status DynamicLossScaler::update(bool overflow) {
  LossScalerState& s = state_;
  if (overflow) {
    if (config_.hysteresis == 1 || s.hysteresis_left == 1) {
      if (s.scale == config_.min_scale && config_.raise_error_at_min_scale) {
        return absl::FailedPreconditionError(absl::StrCat(
            "loss scale is already at its minimum (", s.scale, ") and gradients overflowed again ",
            "at iteration ", s.iteration, ": cannot decrease the scale further; stop the run, ",
            "and lower the learning rate or min_loss_scale"));
      }
      s.scale = std::max(s.scale / config_.scale_factor, config_.min_scale);
    } else {
      --s.hysteresis_left;
    }
    s.last_overflow_iteration = s.iteration;
  } else {
    if (config_.consecutive_hysteresis) s.hysteresis_left = config_.hysteresis;
    if ((s.iteration - s.last_overflow_iteration) % config_.scale_window == 0) {
      s.hysteresis_left = config_.hysteresis;
      s.scale *= config_.scale_factor;
    }
  }
  ++s.iteration;
  return absl::OkStatus();
}

bool has_inf_or_nan(const float* g, size_t n) {
  for (size_t begin = 0; begin < n; begin += kScanBlock) {
    const size_t end = std::min(n, begin + kScanBlock);
    uint32_t found = 0;
    for (size_t i = begin; i < end; ++i) {
      uint32_t bits;
      std::memcpy(&bits, g + i, sizeof(bits));
      found |= (bits & kExponentMask) == kExponentMask;
    }
    if (found != 0) return true;
  }
  return false;
}

void unscale_grads(float* g, size_t n, double scale) {
  const float inverse = static_cast<float>(1.0 / scale);
  for (size_t i = 0; i < n; ++i)
    g[i] *= inverse;
}

}  // namespace troupe::nn
