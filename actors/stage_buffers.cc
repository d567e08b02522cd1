#include "actors/stage_buffers.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace troupe::actors {

std::unique_ptr<StageBuffers> StageBuffers::whole(nn::GPT& gpt) {
  std::unique_ptr<StageBuffers> b(new StageBuffers);
  b->gpt_ = &gpt;
  b->range_ = {0, gpt.num_params()};
  b->params_base_ = gpt.params();
  b->grads_base_ = gpt.grads();
  return b;
}

absl::StatusOr<std::unique_ptr<StageBuffers>> StageBuffers::stage(nn::GPT& gpt,
                                                                  nn::ParamRange range,
                                                                  bool wte_copy) {
  if (gpt.params() != nullptr || gpt.grads() != nullptr) {
    return absl::FailedPreconditionError("StageBuffers: the model owns its buffers");
  }
  const size_t wte_end = gpt.param_layout().wpe();  // wte is the buffer's first tensor
  if (wte_copy && range.begin < wte_end) {
    return absl::InvalidArgumentError(absl::StrCat("StageBuffers: range [", range.begin, ", ",
                                                   range.end, ") holds wte; it needs no copy"));
  }
  std::unique_ptr<StageBuffers> b(new StageBuffers);
  b->range_ = range;
  auto allocate = [&](nn::ParamRange r, nn::FloatBuffer& params,
                      nn::FloatBuffer& grads) -> absl::Status {
    if (absl::Status s = params.reset(nn::MemoryCategory::kParameters, r.size()); !s.ok()) return s;
    if (absl::Status s = grads.reset(nn::MemoryCategory::kGradients, r.size()); !s.ok()) return s;
    if (absl::Status s = gpt.bind_parameters(r.begin, r.end, params.data()); !s.ok()) return s;
    return gpt.bind_gradients(r.begin, r.end, grads.data());
  };
  if (absl::Status s = allocate(range, b->own_params_, b->own_grads_); !s.ok()) return s;
  if (wte_copy) {
    if (absl::Status s = allocate({0, wte_end}, b->wte_params_, b->wte_grads_); !s.ok()) return s;
  }
  b->params_base_ = b->own_params_.data();
  b->grads_base_ = b->own_grads_.data();
  return b;
}

void StageBuffers::zero_grads() {
  if (gpt_ != nullptr) {
    gpt_->zero_grad();
    return;
  }
  if (own_grads_.size() > 0) std::memset(own_grads_.data(), 0, own_grads_.bytes());
  if (wte_grads_.size() > 0) std::memset(wte_grads_.data(), 0, wte_grads_.bytes());
}

}  // namespace troupe::actors
