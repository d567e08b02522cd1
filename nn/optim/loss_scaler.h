// Dynamic loss scaling for fp16 training, with the state machine of
// DeepSpeed's DynamicLossScaler (deepspeed/runtime/fp16/loss_scaler.py) as
// configured by the `fp16` config section.
//
// Each step the loss is multiplied by scale() before the backward pass.
// Then, with overflow = "some rank's gradients hold inf or nan" (agreed
// across ranks, e.g. by an allreduce of has_inf_or_nan), the trainer skips
// the optimizer step on overflow, otherwise unscales the gradients (times
// 1 / scale) and applies it; either way it then calls update(overflow) once:
//
//   overflow, and hysteresis == 1 or hysteresis_left == 1:
//       if scale == min_scale and raise_error_at_min_scale: error, no change
//       else scale = max(scale / scale_factor, min_scale)
//   overflow, otherwise:  hysteresis_left -= 1   (the scale is kept)
//   overflow, either way: last_overflow_iteration = iteration
//   no overflow:
//       if consecutive_hysteresis: hysteresis_left = hysteresis
//       if (iteration - last_overflow_iteration) % scale_window == 0:
//           hysteresis_left = hysteresis; scale *= scale_factor
//   then iteration += 1 (also on overflow; not on the error)
//
// So the scale grows on every scale_window-th consecutive clean step, and
// with the default hysteresis 2 the first overflow after a growth only uses
// up the hysteresis; later ones, until the next growth, halve the scale
// (unless consecutive_hysteresis, which restores it after any clean step).
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace troupe::nn {

// Defaults are DeepSpeed's fp16 section defaults; the field names say which key.
struct LossScalerConfig {
  int initial_scale_power = 16;          // initial_scale_power: scale starts at 2^power
  int scale_window = 1000;               // loss_scale_window
  int hysteresis = 2;                    // hysteresis (DynamicLossScaler's delayed_shift)
  bool consecutive_hysteresis = false;   // consecutive_hysteresis
  double min_scale = 1.0;                // min_loss_scale
  double scale_factor = 2.0;             // fixed at 2 by DeepSpeed's config; backoff is 1 / factor
  bool raise_error_at_min_scale = true;  // DeepSpeed raises (and the run exits)
};

// Everything a checkpoint must keep to resume the scaler exactly.
struct LossScalerState {
  double scale = 0;
  int64_t iteration = 0;                 // update() calls so far (DeepSpeed's cur_iter)
  int64_t last_overflow_iteration = -1;  // -1 before any overflow
  int hysteresis_left = 0;               // DeepSpeed's cur_hysteresis
  friend bool operator==(const LossScalerState&, const LossScalerState&) = default;
};

class DynamicLossScaler {
 public:
  // InvalidArgument naming the field unless scale_window >= 1,
  // hysteresis >= 1, min_scale > 0, scale_factor > 1 (all finite) and
  // |initial_scale_power| <= 126 (so 1 / scale is a normal fp32).
  static absl::StatusOr<DynamicLossScaler> create(const LossScalerConfig& config);
  // Resumes from a checkpointed state; InvalidArgument if the config is
  // invalid or the state could not have come from it.
  static absl::StatusOr<DynamicLossScaler> restore(const LossScalerConfig& config,
                                                   const LossScalerState& state);

  double scale() const { return state_.scale; }
  int hysteresis_left() const { return state_.hysteresis_left; }
  const LossScalerState& state() const { return state_; }

  // Records one step's outcome (see above). FailedPrecondition, with the
  // state unchanged, on an overflow at min_scale when
  // raise_error_at_min_scale: the scale cannot go lower, and training
  // should stop (DeepSpeed exits the run).
  [[nodiscard]] absl::Status update(bool overflow);

 private:
  DynamicLossScaler(const LossScalerConfig& config, const LossScalerState& state)
      : config_(config), state_(state) {}

  LossScalerConfig config_;
  LossScalerState state_;
};

// True if any of g[0, n) is inf or nan. Vectorised; scans in blocks and
// stops at the first block that has one.
bool has_inf_or_nan(const float* g, size_t n);

// g[i] *= f32(1 / scale) over [0, n) (DeepSpeed's grad.mul_(1. / scale)).
// REQUIRES: scale > 0.
void unscale_grads(float* g, size_t n, double scale);

}  // namespace troupe::nn
