#include "actors/distributed_optimizer_sync.h"

#include <algorithm>

#include "actors/step_clock.h"

namespace troupe::actors {

DistributedOptimizerSync::DistributedOptimizerSync(const GradientSyncOptions& options,
                                                   const StagePlan& plan, nn::Model& gpt,
                                                   CollectiveGroup& group, StageBuffers& buffers)
    : options_(options),
      plan_(plan),
      gpt_(gpt),
      group_(group),
      buffers_(buffers),
      partition_(plan.params, group.world_size(), group.rank()) {}

GoOn DistributedOptimizerSync::go_on() const {
  return [this] { return group_.failed(); };
}

std::vector<nn::ParamRange> DistributedOptimizerSync::buckets() const {
  const auto size = static_cast<size_t>(std::max<int64_t>(options_.bucket_elements, 1));
  std::vector<nn::ParamRange> out;
  for (size_t at = plan_.params.begin; at < plan_.params.end; at += size)
    out.push_back({at, std::min(plan_.params.end, at + size)});
  return out;
}

absl::Status DistributedOptimizerSync::gather() {
  const double t0 = now_ms();
  std::vector<transport::Work> gathering;
  for (const nn::ParamRange& b : buckets()) {
    std::vector<size_t> counts = partition_.counts(b.begin, b.end);
    for (size_t& c : counts)
      c *= sizeof(float);
    const nn::ParamRange mine = partition_.own_in(b.begin, b.end);
    float* data = buffers_.params(b.begin);
    gathering.push_back(
        group_.allgather_v_async(data + (mine.begin - b.begin), data, std::span(counts)));
  }
  absl::Status first;
  for (const transport::Work& w : gathering)
    first.Update(CollectiveGroup::wait(w));
  gather_ms_ += now_ms() - t0;
  return first;
}

void DistributedOptimizerSync::drain() {
  pending_.drain();
}

absl::Status DistributedOptimizerSync::begin_step() {
  // Nothing is pending: the stage drained before it began the step.
  buffers_.zero_grads();
  issue_ms_ = gather_ms_ = 0;
  return gather();
}

absl::StatusOr<float> DistributedOptimizerSync::forward(const int32_t* inputs,
                                                        const int32_t* targets, int B, int T,
                                                        bool) {
  return forward_stage(gpt_, plan_, inputs, targets, B, T, go_on());
}

absl::Status DistributedOptimizerSync::backward(float dloss, bool last) {
  if (absl::Status s = backward_stage(gpt_, plan_, dloss, nullptr, go_on()); !s.ok() || !last) {
    return s;
  }
  for (const nn::ParamRange& b : buckets()) {
    const double t0 = now_ms();
    const nn::ParamRange mine = partition_.own_in(b.begin, b.end);
    float* data = buffers_.grads(b.begin);
    // In place: this rank's block of the bucket receives its reduced part.
    pending_.add(group_.reduce_scatter_v_async(DType::kFloat32, ReduceOp::kAvg, data,
                                               data + (mine.begin - b.begin),
                                               partition_.counts(b.begin, b.end)),
                 t0);
    issue_ms_ += now_ms() - t0;
  }
  backward_done_ms_ = now_ms();
  return absl::OkStatus();
}

absl::Status DistributedOptimizerSync::finish(SyncTimes& times) {
  if (absl::Status s = pending_.wait_all(times); !s.ok()) return s;
  // The gathering at the step's start held up the forward: it is exposed.
  times.comm_ms += gather_ms_;
  times.exposed_ms = gather_ms_ + issue_ms_ + now_ms() - backward_done_ms_;
  return absl::OkStatus();
}

}  // namespace troupe::actors
