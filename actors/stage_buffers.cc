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
    const nn::Device device = model.device();
    if (absl::Status s = params.reset(nn::MemoryCategory::kParameters, r.size(), true, device);
        !s.ok()) {
      return s;
    }
    if (absl::Status s = grads.reset(nn::MemoryCategory::kGradients, r.size(), true, device);
        !s.ok()) {
      return s;
    }
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
  for (nn::FloatBuffer* b : {&own_grads_, &embedding_grads_}) {
    if (b->size() == 0) continue;
    // Where the buffers are (the model's device); a failed clear there fails the next kernel.
    nn::zero_bytes(b->data(), b->device(), static_cast<int64_t>(b->bytes())).IgnoreError();
  }
}

}  // namespace troupe::actors
