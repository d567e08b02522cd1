#include "actors/allreduce_gradient_sync.h"

#include <algorithm>

#include "actors/step_clock.h"
#include "core/cluster/collective_group.h"

namespace troupe::actors {

AllreduceGradientSync::AllreduceGradientSync(const GradientSyncOptions& options,
                                             const StagePlan& plan, nn::Model& gpt,
                                             CollectiveGroup& group, StageBuffers& buffers)
    : options_(options),
      plan_(plan),
      model_(gpt),
      group_(group),
      buffers_(buffers),
      buckets_(gpt.layout(), static_cast<size_t>(std::max<int64_t>(options.bucket_elements, 1)),
               gpt.layout().token_embedding().end) {}  // the token embedding: two shares, below

GoOn AllreduceGradientSync::go_on() const {
  return [this] { return group_.failed(); };
}

void AllreduceGradientSync::issue_range(float* data, size_t count) {
  const double t0 = now_ms();
  pending_.add(group_.allreduce_async(DType::kFloat32, ReduceOp::kAvg, data, count), t0);
  // Whatever issuing does on this thread holds up backward: it is exposed.
  issue_ms_ += now_ms() - t0;
}

void AllreduceGradientSync::issue(const std::vector<size_t>& ready) {
  for (size_t i : ready) {
    const GradientBucket& b = buckets_.buckets()[i];
    issue_range(model_.grads() + b.begin, b.end - b.begin);
  }
}

void AllreduceGradientSync::drain() {
  pending_.drain();
  CollectiveGroup::wait(token_mask_work_).IgnoreError();
}

absl::Status AllreduceGradientSync::begin_step() {
  // Nothing is pending: the stage drained before it began the step.
  buffers_.zero_grads();
  issue_ms_ = 0;
  return absl::OkStatus();
}

absl::StatusOr<float> AllreduceGradientSync::forward(const int32_t* inputs, const int32_t* targets,
                                                     int B, int T, bool last) {
  if (last && sparse_embedding()) reduce_token_mask({inputs, static_cast<size_t>(B) * T});
  return forward_stage(model_, plan_, inputs, targets, B, T, go_on());
}

absl::Status AllreduceGradientSync::backward(float dloss, bool last) {
  if (!last) return backward_stage(model_, plan_, dloss, nullptr, go_on());
  if (!whole_model()) {
    absl::Status s = backward_stage(model_, plan_, dloss, nullptr, go_on());
    if (!s.ok()) return s;
    const size_t bucket = static_cast<size_t>(std::max<int64_t>(options_.bucket_elements, 1));
    for (size_t at = plan_.params.begin; at < plan_.params.end; at += bucket)
      issue_range(buffers_.grads(at), std::min(bucket, plan_.params.end - at));
    backward_done_ms_ = now_ms();
    return absl::OkStatus();
  }
  absl::Status s =
      sparse_embedding() ? issue_backward(model_, dloss) : issue_backward_dense(model_, dloss);
  // A failed backward leaves no reduction running on buffers the stage will clear.
  if (!s.ok()) drain();
  return s;
}

void AllreduceGradientSync::reduce_token_mask(std::span<const int32_t> inputs) {
  const double t0 = now_ms();
  token_mask_.assign(static_cast<size_t>(model_.config().vocab_size()), 0.0f);
  for (int32_t token : inputs) {
    // Out-of-range tokens are left for forward to refuse.
    if (token >= 0 && static_cast<size_t>(token) < token_mask_.size()) token_mask_[token] = 1.0f;
  }
  // The union of the replicas' token masks is reduced while forward runs.
  token_mask_work_ = group_.allreduce_async(DType::kFloat32, ReduceOp::kMax, token_mask_.data(),
                                            token_mask_.size());
  issue_ms_ += now_ms() - t0;
}

absl::Status AllreduceGradientSync::issue_backward(nn::Model& gpt, float dloss) {
  const nn::ModelLayout& layout = gpt.layout();
  const int L = layout.num_layers();
  const size_t C = static_cast<size_t>(gpt.config().hidden_size());
  const size_t embedding_end = layout.token_embedding().end;
  const bool overlap = options_.overlap_comm;
  buckets_.reset();
  if (absl::Status s = gpt.head_backward(dloss); !s.ok()) return s;
  // The token embedding's gradient: a tied head's share (and earlier micro-batches' whole
  // gradients) is final.
  if (overlap) issue_range(gpt.grads(), embedding_end);
  if (overlap) issue(buckets_.ready(layout.block_begin(L)));
  nn::Model::GradientsFinal on_final;
  if (overlap) on_final = [&](size_t from) { issue(buckets_.ready(from)); };
  // Block by block: a reduction that failed (the group lost a member) ends
  // the backward of a step that cannot succeed.
  for (int l = L - 1; l >= 0; --l) {
    if (absl::Status s = group_.failed(); !s.ok()) return s;
    if (absl::Status s = gpt.backward_blocks(l, l + 1, on_final); !s.ok()) return s;
  }
  // The embedding's share: the rows of the tokens in any replica's micro-batch.
  if (absl::Status s = CollectiveGroup::wait(token_mask_work_); !s.ok()) return s;
  row_of_.assign(token_mask_.size(), -1);
  row_tokens_.clear();
  for (size_t v = 0; v < token_mask_.size(); ++v) {
    if (token_mask_[v] == 0.0f) continue;
    row_of_[v] = static_cast<int32_t>(row_tokens_.size());
    row_tokens_.push_back(static_cast<int32_t>(v));
  }
  rows_.assign(row_tokens_.size() * C, 0.0f);
  if (absl::Status s =
          gpt.embed_backward_rows(rows_.data(), row_of_, static_cast<int>(row_tokens_.size()));
      !s.ok()) {
    return s;
  }
  if (!overlap) issue_range(gpt.grads(), embedding_end);
  issue(buckets_.ready(0));
  if (!rows_.empty()) issue_range(rows_.data(), rows_.size());
  backward_done_ms_ = now_ms();
  return absl::OkStatus();
}

absl::Status AllreduceGradientSync::issue_backward_dense(nn::Model& gpt, float dloss) {
  const nn::ModelLayout& layout = gpt.layout();
  const int L = layout.num_layers();
  const bool overlap = options_.overlap_comm;
  buckets_.reset();
  if (absl::Status s = gpt.head_backward(dloss); !s.ok()) return s;
  if (overlap) issue(buckets_.ready(layout.block_begin(L)));
  nn::Model::GradientsFinal on_final;
  if (overlap) on_final = [&](size_t from) { issue(buckets_.ready(from)); };
  for (int l = L - 1; l >= 0; --l) {
    if (absl::Status s = group_.failed(); !s.ok()) return s;
    if (absl::Status s = gpt.backward_blocks(l, l + 1, on_final); !s.ok()) return s;
  }
  if (absl::Status s = gpt.embed_backward(); !s.ok()) return s;
  issue_range(gpt.grads(), layout.token_embedding().end);
  issue(buckets_.ready(0));
  backward_done_ms_ = now_ms();
  return absl::OkStatus();
}

void AllreduceGradientSync::add_embedding_rows() {
  const size_t C = static_cast<size_t>(model_.config().hidden_size());
  float* dwte = model_.grads();  // the token embedding is the buffer's first tensor
  for (size_t r = 0; r < row_tokens_.size(); ++r) {
    float* d = dwte + static_cast<size_t>(row_tokens_[r]) * C;
    const float* g = rows_.data() + r * C;
    for (size_t i = 0; i < C; ++i)
      d[i] += g[i];
  }
  row_tokens_.clear();
  rows_.clear();
}

absl::Status AllreduceGradientSync::finish(SyncTimes& times) {
  if (absl::Status s = pending_.wait_all(times); !s.ok()) return s;
  times.exposed_ms = issue_ms_ + now_ms() - backward_done_ms_;
  add_embedding_rows();
  return absl::OkStatus();
}

}  // namespace troupe::actors
