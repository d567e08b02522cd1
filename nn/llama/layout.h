// Where each parameter of a Llama-family model lives in its flat buffer. The tensors carry Hugging
// Face's names, so that import and export are a copy. Shapes: C = hidden_size, I =
// intermediate_size, NH = heads, KV = key/value heads, hd = C / NH, Vp = padded vocabulary.
//
// Buffer order (row-major tensors, one after the other):
//   model.embed_tokens.weight [Vp, C]
//   block l: model.layers.<l>.input_layernorm.weight [C],
//            .self_attn.q_proj.weight [NH*hd, C], .self_attn.k_proj.weight [KV*hd, C],
//            .self_attn.v_proj.weight [KV*hd, C], .self_attn.o_proj.weight [C, NH*hd],
//            .post_attention_layernorm.weight [C],
//            .mlp.gate_proj.weight [I, C], .mlp.up_proj.weight [I, C], .mlp.down_proj.weight [C, I]
//   model.norm.weight [C], and when the head is not tied lm_head.weight [Vp, C].
// q, k and v are adjacent, so one GEMM computes all three; so are gate and up.
//
// Tensor parallelism (Megatron-LM) cuts q, k, v (the rank's heads and KV heads), gate and up by
// rows (column-parallel), o_proj and down_proj by columns (row-parallel), the embedding and the
// head by rows of the vocabulary; the norms are whole on every rank. A rank's q, k and v are
// still adjacent (so are its gate and up).
#pragma once

#include <cstddef>
#include <vector>

#include "absl/status/status.h"
#include "nn/llama/config.h"
#include "nn/model/layout.h"

namespace troupe::nn {

// OK, or InvalidArgument naming what does not split evenly over slice.size ranks: the heads, the
// KV heads, intermediate_size and the padded vocabulary; or a rank outside [0, size).
[[nodiscard]] absl::Status validate_slice(const LlamaConfig& config, const TensorSlice& slice);

// A block's tensors, in buffer order.
enum class LlamaTensor : int {
  kInputNorm,
  kQ,
  kK,
  kV,
  kO,
  kPostNorm,
  kGate,
  kUp,
  kDown,
};
inline constexpr int kNumLlamaBlockTensors = 9;

// Pointers to each tensor of one buffer laid out as a LlamaLayout (parameters or gradients), by
// index in its model().tensors(); null until pointed at.
struct LlamaTensors {
  std::vector<float*> at;
  bool tied = false;
  float* embed_tokens() const { return at.front(); }
  float* block(int l, LlamaTensor t) const {
    return at[1 + static_cast<size_t>(l) * kNumLlamaBlockTensors + static_cast<size_t>(t)];
  }
  float* norm() const { return at[at.size() - (tied ? 1 : 2)]; }
  // The LM head's weight: the embedding's when tied.
  float* lm_head() const { return tied ? at.front() : at.back(); }
};

// Points the tensors of `tensors` that lie whole in [begin, end) of `layout` at base (the tensor
// at offset o at base + o - begin); the others are left as they are.
void point_llama_tensors(const ModelLayout& layout, size_t begin, size_t end, float* base,
                         LlamaTensors* tensors);

class LlamaLayout {
 public:
  LlamaLayout() = default;
  // REQUIRES: config.validate() and validate_slice(config, slice) are OK.
  explicit LlamaLayout(const LlamaConfig& config, const TensorSlice& slice = {});

  const ModelLayout& model() const { return model_; }
  size_t num_params() const { return model_.num_params(); }
  // Offset of block l's tensor t.
  size_t block_tensor(int l, LlamaTensor t) const {
    return model_.block_begin(l) + block_offsets_[static_cast<int>(t)];
  }
  size_t embed_tokens() const { return 0; }
  size_t norm() const { return model_.block_begin(model_.num_layers()); }
  // The head's own tensor; the embedding's when tied.
  size_t lm_head() const { return lm_head_; }

 private:
  ModelLayout model_;
  size_t block_offsets_[kNumLlamaBlockTensors] = {};
  size_t lm_head_ = 0;
};

}  // namespace troupe::nn
