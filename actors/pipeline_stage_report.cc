// PipelineStageActor's step report: what a step's gradients measure (their norm, fp16's
// overflow), the memory the stage holds and what it sent.
#include <sys/resource.h>

#include <algorithm>

#include "actors/pipeline_stage_actor.h"
#include "actors/step_clock.h"

namespace troupe::actors {
namespace {

int64_t peak_rss_bytes() {
  struct rusage usage = {};
  if (::getrusage(RUSAGE_SELF, &usage) != 0) return 0;
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;  // kilobytes on Linux
}

}  // namespace

absl::Status PipelineStageActor::finish_report(StepReport& report, double start) {
  const nn::Model& gpt = *model_;
  report.owned = sync_->owned();
  float* owned_grads = sync_->owned_gradients();
  const auto n = static_cast<int64_t>(report.owned.size());
  if (options_.precision == nn::DType::kFloat16) {
    // fp16 gradients: values beyond 65504 become inf, as they would there.
    if (absl::Status s = device_backend_->round_to(model_->device().index, owned_grads, owned_grads,
                                                   static_cast<size_t>(n), nn::DType::kFloat16);
        !s.ok()) {
      return s;
    }
  }
  absl::StatusOr<double> norm_sq = owned_norm_squared(report.owned, owned_grads);
  if (!norm_sq.ok()) return norm_sq.status();
  report.grad_norm_sq = *norm_sq;
  report.found_inf = !std::isfinite(report.grad_norm_sq);
  report.samples = static_cast<int64_t>(options_.micro_batch) * options_.grad_accum;
  report.tokens = report.samples * options_.model.max_seq_len();
  report.step_ms = now_ms() - start;
  report.updated_step = tensors_->applied_step.load();
  report.update_ms = static_cast<double>(tensors_->update_us.load()) / 1000.0;
  const nn::ModelMemory held = gpt.memory();
  report.memory = {
      .parameters =
          static_cast<int64_t>(held.parameters + own_params_.bytes() + buffers_->param_bytes()),
      .gradients =
          static_cast<int64_t>(held.gradients + own_grads_.bytes() + buffers_->grad_bytes()),
      .optimizer_state = tensors_->optimizer_bytes.load(),
      .buffers = static_cast<int64_t>(sync_->peak_buffer_bytes()),
      .activations = static_cast<int64_t>(held.activations + held.activation_gradients),
      .peak_rss = peak_rss_bytes()};
  if (group_ != nullptr) {
    const transport::Traffic sent = group_->traffic() - traffic_at_step_;
    report.sent.allreduce = static_cast<int64_t>(sent.allreduce);
    report.sent.reduce_scatter = static_cast<int64_t>(sent.reduce_scatter);
    report.sent.allgather = static_cast<int64_t>(sent.allgather);
  }
  if (pipe_ != nullptr) {
    report.sent.pipeline = static_cast<int64_t>((pipe_->traffic() - pipe_traffic_at_step_).total());
    report.sent.pipeline_received_in_place =
        static_cast<int64_t>(pipe_->received_in_place() - pipe_in_place_at_step_);
  }
  if (tp_ != nullptr) {
    report.sent.tensor_parallel =
        static_cast<int64_t>((tp_->traffic() - tp_traffic_at_step_).total());
  }
  return absl::OkStatus();
}

absl::StatusOr<double> PipelineStageActor::owned_norm_squared(const nn::ParamRange& owned,
                                                              const float* grads) const {
  const int device = model_->device().index;
  if (options_.at.t == 0) return device_backend_->grad_norm_squared(device, grads, owned.size());
  double sum = 0;
  for (const nn::ParamTensor& t : model_->layout().tensors()) {
    if (t.split == nn::TensorSplit::kReplicated) continue;
    const size_t begin = std::max(t.offset, owned.begin);
    const size_t end = std::min(t.offset + t.size, owned.end);
    if (begin >= end) continue;
    absl::StatusOr<double> part =
        device_backend_->grad_norm_squared(device, grads + (begin - owned.begin), end - begin);
    if (!part.ok()) return part.status();
    sum += *part;
  }
  return sum;
}

}  // namespace troupe::actors
