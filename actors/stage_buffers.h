// The flat parameter and gradient buffers a stage computes with, addressed
// by offsets of its slice's whole layout (nn/gpt_param_layout.h):
//
//   whole     the model's own buffers (a stage of the whole model: pp = 1)
//   stage     a pipeline stage's (pp > 1): buffers of its range alone, and
//             on a last stage that is not the first a copy of wte [0, wpe)
//             for the tied LM head, bound into the model (which owns no
//             buffer), so that a stage holds its share of the model and not
//             all of it
//
// params(o) and grads(o) point at offset o, which must lie in a held range;
// a run of offsets read through one pointer must stay in that range.
#pragma once

#include <cstddef>
#include <memory>

#include "absl/status/statusor.h"
#include "nn/gpt2/gpt.h"
#include "nn/memory.h"
#include "nn/optim/param_range.h"

namespace troupe::actors {

class StageBuffers {
 public:
  // The model's own buffers. REQUIRES: it owns both, whole.
  static std::unique_ptr<StageBuffers> whole(nn::GPT& gpt);
  // Buffers of `range` (and with `wte_copy` of wte besides), allocated,
  // zeroed and bound into `gpt`. FailedPrecondition unless the model owns
  // neither buffer; InvalidArgument for a range that cuts a tensor or
  // overlaps wte while wte_copy; ResourceExhausted without the memory.
  static absl::StatusOr<std::unique_ptr<StageBuffers>> stage(nn::GPT& gpt, nn::ParamRange range,
                                                             bool wte_copy);

  // What params(o) and grads(o) hold contiguously besides the wte copy.
  const nn::ParamRange& range() const { return range_; }
  float* params(size_t offset) const { return at(params_base_, wte_params_, offset); }
  float* grads(size_t offset) const { return at(grads_base_, wte_grads_, offset); }
  // Every gradient held, to zero.
  void zero_grads();
  // The bytes it allocated (0 for the model's own).
  size_t param_bytes() const { return own_params_.bytes() + wte_params_.bytes(); }
  size_t grad_bytes() const { return own_grads_.bytes() + wte_grads_.bytes(); }

 private:
  StageBuffers() = default;
  float* at(float* base, const nn::FloatBuffer& wte, size_t offset) const {
    if (offset < range_.begin && wte.data() != nullptr) return wte.data() + offset;
    return base + (offset - range_.begin);
  }

  nn::GPT* gpt_ = nullptr;
  nn::ParamRange range_;
  float* params_base_ = nullptr;  // parameter range_.begin
  float* grads_base_ = nullptr;
  nn::FloatBuffer own_params_, own_grads_;  // stage: [range_]
  nn::FloatBuffer wte_params_, wte_grads_;  // stage with wte_copy: [0, wpe)
};

}  // namespace troupe::actors
