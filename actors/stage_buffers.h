// The flat parameter and gradient buffers a stage computes with, addressed
// by offsets of its slice's whole layout (nn/model/layout.h):
//
//   whole     the model's own buffers (a stage of the whole model: pp = 1)
//   stage     a pipeline stage's (pp > 1): buffers of its range alone, and
//             on a last stage that is not the first, when the head is tied,
//             a copy of the token embedding for it, bound into the model
//             (which owns no buffer), so that a stage holds its share of the
//             model and not all of it
//
// params(o) and grads(o) point at offset o, which must lie in a held range;
// a run of offsets read through one pointer must stay in that range.
#pragma once

#include <cstddef>
#include <memory>

#include "absl/status/statusor.h"
#include "nn/memory.h"
#include "nn/model/model.h"
#include "nn/optim/param_range.h"

namespace troupe::actors {

class StageBuffers {
 public:
  // The model's own buffers. REQUIRES: it owns both, whole.
  static std::unique_ptr<StageBuffers> whole(nn::Model& model);
  // Buffers of `range` (and with `embedding_copy` of the token embedding
  // besides), allocated, zeroed and bound into `model`. FailedPrecondition
  // unless the model owns neither buffer; InvalidArgument for a range that
  // cuts a tensor or overlaps the token embedding while embedding_copy;
  // ResourceExhausted without the memory.
  static absl::StatusOr<std::unique_ptr<StageBuffers>> stage(nn::Model& model, nn::ParamRange range,
                                                             bool embedding_copy);

  // What params(o) and grads(o) hold contiguously besides the embedding copy.
  const nn::ParamRange& range() const { return range_; }
  float* params(size_t offset) const { return at(params_base_, embedding_params_, offset); }
  float* grads(size_t offset) const { return at(grads_base_, embedding_grads_, offset); }
  // Every gradient held, to zero.
  void zero_grads();
  // The bytes it allocated (0 for the model's own).
  size_t param_bytes() const { return own_params_.bytes() + embedding_params_.bytes(); }
  size_t grad_bytes() const { return own_grads_.bytes() + embedding_grads_.bytes(); }

 private:
  StageBuffers() = default;
  float* at(float* base, const nn::FloatBuffer& embedding, size_t offset) const {
    if (offset < range_.begin && embedding.data() != nullptr) return embedding.data() + offset;
    return base + (offset - range_.begin);
  }

  nn::Model* model_ = nullptr;
  nn::ParamRange range_;
  float* params_base_ = nullptr;  // parameter range_.begin
  float* grads_base_ = nullptr;
  nn::FloatBuffer own_params_, own_grads_;              // stage: [range_]
  nn::FloatBuffer embedding_params_, embedding_grads_;  // with embedding_copy
};

}  // namespace troupe::actors
