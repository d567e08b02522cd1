#include "trainers/trainer_controller.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "nn/optim/clip.h"

namespace troupe::trainers {
namespace {

double now_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

absl::StatusOr<TrainerController> TrainerController::create(std::vector<Replica> replicas,
                                                            ControllerOptions options) {
  if (replicas.empty()) return absl::InvalidArgumentError("trainer: no replicas");
  TrainerController controller(std::move(replicas), std::move(options));
  if (controller.options_.dynamic_loss_scale) {
    absl::StatusOr<nn::DynamicLossScaler> scaler =
        nn::DynamicLossScaler::create(*controller.options_.dynamic_loss_scale);
    if (!scaler.ok()) return scaler.status();
    controller.scaler_ = *std::move(scaler);
  }
  return controller;
}

double TrainerController::loss_scale() const {
  if (scaler_) return scaler_->scale();
  return options_.static_loss_scale > 0 ? options_.static_loss_scale : 1.0;
}

absl::Status TrainerController::discard_all(int64_t step) {
  std::vector<Future<void>> pending;
  for (Replica& r : replicas_)
    pending.push_back(r.stage.call(&actors::PipelineStageActor::discard, step));
  absl::Status first;
  for (auto& f : pending)
    first.Update(std::move(f).get(options_.step_timeout));
  return first;
}

absl::StatusOr<StepOutcome> TrainerController::step(int64_t step) {
  const double start = now_ms();
  StepOutcome out;
  out.step = step;
  out.loss_scale = loss_scale();
  actors::StepRequest request{.step = step, .loss_scale = static_cast<float>(out.loss_scale)};
  std::vector<Future<actors::StepReport>> running;
  for (Replica& r : replicas_) {
    running.push_back(r.stage.call(&actors::PipelineStageActor::run_step, request));
  }
  std::vector<actors::StepReport> reports;
  absl::Status failed;
  for (auto& f : running) {
    absl::StatusOr<actors::StepReport> report = std::move(f).get(options_.step_timeout);
    if (report.ok()) {
      reports.push_back(*report);
    } else {
      failed.Update(report.status());
    }
  }
  if (!failed.ok()) {
    discard_all(step).IgnoreError();  // the stages may be gone; the step's error is what matters
    return absl::Status(failed.code(), absl::StrCat("step ", step, ": ", failed.message()));
  }
  double stage_ms = 0;
  bool overflow = false;
  for (const actors::StepReport& r : reports) {
    out.loss += r.loss / static_cast<double>(reports.size());
    out.samples += r.samples;
    out.tokens += r.tokens;
    out.data_position = std::max(out.data_position, r.data_position);
    out.epoch = std::max(out.epoch, r.epoch);
    out.compute_ms = std::max(out.compute_ms, r.forward_ms + r.backward_ms);
    out.comm_ms = std::max(out.comm_ms, r.comm_ms);
    out.comm_exposed_ms = std::max(out.comm_exposed_ms, r.comm_exposed_ms);
    stage_ms = std::max(stage_ms, r.step_ms);
    overflow = overflow || r.found_inf;
  }
  // After the allreduce every replica holds the same gradients: their norms
  // must agree bit for bit. A difference means the replicas diverged.
  for (const actors::StepReport& r : reports) {
    if (!overflow && r.grad_norm_sq != reports[0].grad_norm_sq) {
      discard_all(step).IgnoreError();
      return absl::InternalError(absl::StrCat("step ", step,
                                              ": replicas hold different gradients after the "
                                              "allreduce (squared norms ",
                                              reports[0].grad_norm_sq, " and ", r.grad_norm_sq,
                                              ")"));
    }
  }
  const double scale = out.loss_scale;
  if (overflow) {
    if (!scaler_) {
      discard_all(step).IgnoreError();
      return absl::InternalError(absl::StrCat(
          "step ", step, ": a gradient is inf or NaN (loss ", out.loss,
          "); lower the learning rate, or enable fp16 loss scaling if this is an fp16 run"));
    }
    if (absl::Status s = discard_all(step); !s.ok()) return s;
    if (absl::Status s = scaler_->update(true); !s.ok()) return s;
    out.applied = false;
    out.grad_norm = INFINITY;
    out.step_ms = now_ms() - start;
    out.overhead_ms = std::max(0.0, out.step_ms - stage_ms);
    return out;
  }
  out.grad_norm = std::sqrt(reports[0].grad_norm_sq) / scale;
  absl::StatusOr<nn::GradClip> clip =
      nn::clip_coefficient(out.grad_norm * out.grad_norm, options_.gradient_clipping);
  if (!clip.ok()) return clip.status();
  out.clipped = clip->clipped;
  out.lr = options_.schedule.lr_at(static_cast<int>(applied_ + 1));
  actors::CommitRequest commit{
      .step = step, .lr = out.lr, .grad_scale = static_cast<float>(clip->coef / scale)};
  const double commit_start = now_ms();
  std::vector<Future<int64_t>> committing;
  for (Replica& r : replicas_) {
    committing.push_back(r.shard.call(&actors::ParamShardActor::commit, commit));
  }
  for (auto& f : committing) {
    absl::StatusOr<int64_t> applied = std::move(f).get(options_.step_timeout);
    if (!applied.ok()) {
      // Some shards may have applied the step: the replicas now differ, and
      // only a restore from a checkpoint can make them whole again.
      return absl::Status(
          applied.status().code(),
          absl::StrCat("step ", step, ": commit failed: ", applied.status().message()));
    }
  }
  const double commit_ms = now_ms() - commit_start;
  if (scaler_) {
    if (absl::Status s = scaler_->update(false); !s.ok()) return s;
  }
  ++applied_;
  out.applied = true;
  out.step_ms = now_ms() - start;
  out.overhead_ms = std::max(0.0, out.step_ms - stage_ms - commit_ms);
  return out;
}

}  // namespace troupe::trainers
