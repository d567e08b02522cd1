#include "nn/llama/layout.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace troupe::nn {
namespace {

constexpr const char* kBlockTensorNames[kNumLlamaBlockTensors] = {
    "input_layernorm.weight",  "self_attn.q_proj.weight", "self_attn.k_proj.weight",
    "self_attn.v_proj.weight", "self_attn.o_proj.weight", "post_attention_layernorm.weight",
    "mlp.gate_proj.weight",    "mlp.up_proj.weight",      "mlp.down_proj.weight",
};

constexpr TensorSplit kBlockSplits[kNumLlamaBlockTensors] = {
    TensorSplit::kReplicated, TensorSplit::kRows,    TensorSplit::kRows,
    TensorSplit::kRows,       TensorSplit::kColumns, TensorSplit::kReplicated,
    TensorSplit::kRows,       TensorSplit::kRows,    TensorSplit::kColumns,
};

size_t numel(const std::vector<int>& shape) {
  size_t n = 1;
  for (int d : shape)
    n *= static_cast<size_t>(d);
  return n;
}

}  // namespace

absl::Status validate_slice(const LlamaConfig& config, const TensorSlice& slice) {
  if (slice.size < 1 || slice.rank < 0 || slice.rank >= slice.size) {
    return absl::InvalidArgumentError(absl::StrCat("Llama: tensor-parallel rank ", slice.rank,
                                                   " of ", slice.size, " is not a rank"));
  }
  struct Part {
    const char* what;
    int value;
  };
  for (const Part& p : {Part{"num_attention_heads", config.num_attention_heads},
                        Part{"num_key_value_heads", config.kv_heads()},
                        Part{"intermediate_size", config.intermediate_size},
                        Part{"the padded vocabulary", config.padded_vocab()}}) {
    if (p.value % slice.size != 0) {
      return absl::InvalidArgumentError(absl::StrCat("Llama: ", p.what, " = ", p.value,
                                                     " does not split over tensor-parallel size ",
                                                     slice.size));
    }
  }
  return absl::OkStatus();
}

LlamaLayout::LlamaLayout(const LlamaConfig& config, const TensorSlice& slice) {
  const int C = config.hidden_size, tp = slice.size, hd = config.head_dim();
  const int q = config.num_attention_heads * hd / tp, kv = config.kv_heads() * hd / tp;
  const int I = config.intermediate_size / tp, Vl = config.padded_vocab() / tp;
  std::vector<ParamTensor> tensors;
  size_t n = 0;
  auto add = [&](std::string name, std::vector<int> shape, TensorSplit split) {
    const size_t size = numel(shape);
    const bool decay = shape.size() != 1;  // norm weights are not decayed
    tensors.push_back({std::move(name), n, size, std::move(shape), split, decay});
    n += size;
  };
  add("model.embed_tokens.weight", {Vl, C}, TensorSplit::kRows);
  const std::vector<std::vector<int>> shapes = {{C}, {q, C}, {kv, C}, {kv, C}, {C, q},
                                                {C}, {I, C}, {I, C},  {C, I}};
  for (int l = 0; l < config.num_hidden_layers; ++l) {
    const size_t begin = n;
    for (int t = 0; t < kNumLlamaBlockTensors; ++t) {
      if (l == 0) block_offsets_[t] = n - begin;
      add(absl::StrCat("model.layers.", l, ".", kBlockTensorNames[t]), shapes[t], kBlockSplits[t]);
    }
  }
  add("model.norm.weight", {C}, TensorSplit::kReplicated);
  lm_head_ = 0;
  if (!config.tie_word_embeddings) {
    lm_head_ = n;
    add("lm_head.weight", {Vl, C}, TensorSplit::kRows);
  }
  // Llama::block_backward finishes a block's tensors in this order: down, gate and up, the
  // post-attention norm, o, q k v, the input norm.
  ModelLayout::Blocks blocks;
  blocks.first_tensor = 1;
  blocks.tensors_per_block = kNumLlamaBlockTensors;
  for (LlamaTensor t : {LlamaTensor::kDown, LlamaTensor::kGate, LlamaTensor::kPostNorm,
                        LlamaTensor::kO, LlamaTensor::kQ, LlamaTensor::kInputNorm}) {
    blocks.backward_order.push_back(static_cast<size_t>(t));
  }
  blocks.quiet_tail = static_cast<size_t>(LlamaTensor::kO);
  model_ = ModelLayout(slice, config.num_hidden_layers, std::move(tensors), blocks,
                       config.tie_word_embeddings);
}

void point_llama_tensors(const ModelLayout& layout, size_t begin, size_t end, float* base,
                         LlamaTensors* tensors) {
  const std::vector<ParamTensor>& all = layout.tensors();
  for (size_t i = 0; i < all.size(); ++i) {
    const ParamTensor& t = all[i];
    if (t.offset < begin || t.offset + t.size > end || t.size == 0) continue;
    tensors->at[i] = base + (t.offset - begin);
  }
}

}  // namespace troupe::nn
