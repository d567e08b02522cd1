#include "actors/param_shard_actor.h"

#include <cstring>
#include <stdexcept>
#include <utility>

#include "absl/strings/str_cat.h"
#include "actors/handoff.h"
#include "nn/dtype.h"
#include "nn/gpt.h"
#include "nn/optim/clip.h"

namespace troupe::actors {
namespace {

nn::GPTParamLayout checked_layout(const ModelSpec& model) {
  nn::GPTConfig config = model.gpt();
  if (absl::Status s = config.validate(); !s.ok()) {
    throw std::invalid_argument(std::string(s.message()));
  }
  return nn::GPTParamLayout(config);
}

}  // namespace

ParamShardActor::ParamShardActor(ShardOptions options)
    : options_(std::move(options)),
      layout_(checked_layout(options_.model)),
      no_decay_(layout_.no_decay_ranges()) {
  const size_t n = layout_.num_params();
  if (options_.precision != Precision::kFp32) master_.assign(n, 0.0f);
  m_.assign(n, 0.0f);
  if (options_.optimizer.kind == OptimizerSpec::kAdamW) v_.assign(n, 0.0f);
}

absl::StatusOr<std::shared_ptr<StageTensors>> ParamShardActor::stage() {
  std::string name = actor_name(options_.job, "stage", options_.at);
  std::shared_ptr<StageTensors> tensors = Handoff::find<StageTensors>(name);
  if (tensors == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("parameter shard of ", name, ": its stage is not in this process"));
  }
  if (tensors->n != layout_.num_params()) {
    return absl::FailedPreconditionError(
        absl::StrCat("parameter shard of ", name, ": the stage has ", tensors->n,
                     " parameters, the shard ", layout_.num_params()));
  }
  return tensors;
}

float* ParamShardActor::masters(StageTensors& stage) {
  return master_.empty() ? stage.params : master_.data();
}

void ParamShardActor::refresh_compute_copy(StageTensors& stage) {
  if (master_.empty()) return;  // fp32: the stage computes with the masters themselves
  const nn::DType half =
      options_.precision == Precision::kBf16 ? nn::DType::kBFloat16 : nn::DType::kFloat16;
  // Round each master to the compute type and back: the stage's kernels read
  // fp32, holding exactly the values a bf16 / fp16 copy holds.
  rounded_.resize(master_.size());
  nn::convert(master_.data(), nn::DType::kFloat32, rounded_.data(), half,
              static_cast<int64_t>(master_.size()));
  nn::convert(rounded_.data(), half, stage.params, nn::DType::kFloat32,
              static_cast<int64_t>(master_.size()));
}

absl::StatusOr<int64_t> ParamShardActor::init() {
  absl::StatusOr<std::shared_ptr<StageTensors>> s = stage();
  if (!s.ok()) return s.status();
  absl::StatusOr<nn::GPT> model = nn::GPT::create(options_.model.gpt());
  if (!model.ok()) return model.status();
  model->init_parameters(options_.seed);
  std::memcpy(masters(**s), model->params(), layout_.num_params() * sizeof(float));
  refresh_compute_copy(**s);
  std::fill(m_.begin(), m_.end(), 0.0f);
  std::fill(v_.begin(), v_.end(), 0.0f);
  applied_ = 0;
  return static_cast<int64_t>(layout_.num_params());
}

absl::StatusOr<int64_t> ParamShardActor::commit(CommitRequest request) {
  absl::StatusOr<std::shared_ptr<StageTensors>> s = stage();
  if (!s.ok()) return s.status();
  StageTensors& t = **s;
  const size_t n = layout_.num_params();
  if (request.grad_scale != 1.0f) nn::scale_grads(t.grads, n, request.grad_scale);
  const int step = static_cast<int>(applied_ + 1);
  float* p = masters(t);
  if (options_.optimizer.kind == OptimizerSpec::kAdamW) {
    nn::adamw_update(p, t.grads, m_.data(), v_.data(), n, options_.optimizer.adamw(request.lr),
                     request.lr, step, no_decay_);
  } else {
    nn::sgd_update(p, t.grads, options_.optimizer.momentum > 0 ? m_.data() : nullptr, n,
                   options_.optimizer.sgd(request.lr), request.lr, step);
  }
  refresh_compute_copy(t);
  applied_ = step;
  return applied_;
}

absl::StatusOr<std::vector<float>> ParamShardActor::master_params() {
  absl::StatusOr<std::shared_ptr<StageTensors>> s = stage();
  if (!s.ok()) return s.status();
  const float* p = masters(**s);
  return std::vector<float>(p, p + layout_.num_params());
}

absl::Status ParamShardActor::load_params(std::vector<float> params) {
  if (params.size() != layout_.num_params()) {
    return absl::InvalidArgumentError(absl::StrCat("load_params: ", params.size(),
                                                   " values for a model of ", layout_.num_params(),
                                                   " parameters"));
  }
  absl::StatusOr<std::shared_ptr<StageTensors>> s = stage();
  if (!s.ok()) return s.status();
  std::memcpy(masters(**s), params.data(), params.size() * sizeof(float));
  refresh_compute_copy(**s);
  std::fill(m_.begin(), m_.end(), 0.0f);
  std::fill(v_.begin(), v_.end(), 0.0f);
  applied_ = 0;
  return absl::OkStatus();
}

TROUPE_ACTOR_CONSTRUCTOR(ParamShardActor, ShardOptions);

}  // namespace troupe::actors
