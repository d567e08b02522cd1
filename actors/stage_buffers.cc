#include "actors/stage_buffers.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace troupe::actors {

std::unique_ptr<StageBuffers> StageBuffers::whole(nn::Model& model) {
  std::unique_ptr<StageBuffers> b(new StageBuffers);
  b->model_ = &model;
  b->range_ = {0, model.num_params()};
  b->params_base_ = model.params();
  b->grads_base_ = model.grads();
  return b;
}

absl::StatusOr<std::unique_ptr<StageBuffers>> StageBuffers::stage(nn::Model& model,
                                                                  nn::ParamRange range,
                                                                  bool embedding_copy) {
  if (model.params() != nullptr || model.grads() != nullptr) {
    return absl::FailedPreconditionError("StageBuffers: the model owns its buffers");
  }
  const nn::ParamRange embedding = model.layout().token_embedding();
  if (embedding_copy && range.begin < embedding.end) {
    return absl::InvalidArgumentError(
        absl::StrCat("StageBuffers: range [", range.begin, ", ", range.end,
                     ") holds the token embedding; it needs no copy"));
  }
  std::unique_ptr<StageBuffers> b(new StageBuffers);
  b->range_ = range;
  auto allocate = [&](nn::ParamRange r, nn::FloatBuffer& params,
                      nn::FloatBuffer& grads) -> absl::Status {
    if (absl::Status s = params.reset(nn::MemoryCategory::kParameters, r.size()); !s.ok()) return s;
    if (absl::Status s = grads.reset(nn::MemoryCategory::kGradients, r.size()); !s.ok()) return s;
    if (absl::Status s = model.bind_parameters(r.begin, r.end, params.data()); !s.ok()) return s;
    return model.bind_gradients(r.begin, r.end, grads.data());
  };
  if (absl::Status s = allocate(range, b->own_params_, b->own_grads_); !s.ok()) return s;
  if (embedding_copy) {
    if (absl::Status s = allocate(embedding, b->embedding_params_, b->embedding_grads_); !s.ok())
      return s;
  }
  b->params_base_ = b->own_params_.data();
  b->grads_base_ = b->own_grads_.data();
  return b;
}

void StageBuffers::zero_grads() {
  if (model_ != nullptr) {
    model_->zero_grad();
    return;
  }
  if (own_grads_.size() > 0) std::memset(own_grads_.data(), 0, own_grads_.bytes());
  if (embedding_grads_.size() > 0)
    std::memset(embedding_grads_.data(), 0, embedding_grads_.bytes());
}

}  // namespace troupe::actors
