// A Llama-family model (Llama 2/3, Mistral-style GQA, TinyLlama, SmolLM): token embedding, L
// pre-norm blocks of RMSNorm, causal self-attention with rotary position embeddings (Hugging
// Face's rotate-half layout, rope_theta) and grouped-query attention, RMSNorm, a SwiGLU MLP
// (down(silu(gate(x)) * up(x))), a final RMSNorm and an LM head, tied to the embedding or its own.
// No biases. It matches Hugging Face's LlamaForCausalLM (tests/nn/llama_parity_test.cc).
//
// The second architecture behind the model seam (nn/model/model.h gives the contract of every
// piece); its tensors and their offsets are in nn/llama/layout.h.
//
// Tensor parallelism (Megatron-LM): rank r of tp holds NH/tp heads and KV/tp KV heads (q, k, v
// column-parallel, o row-parallel), I/tp of the MLP (gate and up column-parallel, down
// row-parallel) and Vp/tp rows of the vocabulary in the embedding and the head. The all-reduces:
// twice per block in forward (after o and down) and twice in backward (the inputs' gradients of
// q k v and of gate up), once in the embedding, and in the head (the loss's max and sums, and the
// gradient of its input).
//
// Recomputation (ModelOptions::recompute_activations): the forward keeps per block only the two
// norms' rstd, the q k v and gate up projections and the two residual sums; backward recomputes,
// block by block into one block's buffers, the norms' outputs, the rotated attention input, the
// attention's output and log-sum-exps and the SwiGLU output.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nn/llama/config.h"
#include "nn/llama/layout.h"
#include "nn/memory.h"
#include "nn/model/activation_store.h"
#include "nn/model/model.h"

namespace troupe::nn {

class Llama final : public Model {
 public:
  // InvalidArgument when the config is not valid or does not split into the slice,
  // ResourceExhausted without the memory. Parameters and gradients are zero.
  [[nodiscard]] static absl::StatusOr<Llama> create(const LlamaConfig& config,
                                                    const ModelOptions& options = {},
                                                    const ModelStorage& storage = {},
                                                    const TensorSlice& slice = {});
  // The range [begin, end) of rank `slice`'s layout of what init_parameters(seed) gives the
  // whole model: every matrix normal(0, 0.02), o_proj and down_proj normal(0, 0.02 / sqrt(2L)),
  // norm weights 1, the padding rows of the embedding and head 0.
  static void init_parameters(const LlamaConfig& config, const TensorSlice& slice, uint64_t seed,
                              size_t begin, size_t end, float* out);

  Llama(Llama&&) = default;
  Llama& operator=(Llama&&) = default;

  const ModelConfig& config() const override { return model_config_; }
  const LlamaConfig& llama_config() const { return config_; }
  const ModelOptions& options() const override { return options_; }
  const ModelLayout& layout() const override { return layout_.model(); }
  const LlamaLayout& llama_layout() const { return layout_; }

  void set_tensor_parallel(AllReduceFn allreduce_sum, AllReduceFn allreduce_max) override;
  void init_parameters(uint64_t seed) override;
  using Model::grads;
  using Model::params;
  float* params() override { return params_.data(); }
  float* grads() override { return grads_.data(); }
  [[nodiscard]] absl::StatusOr<float> forward(const int32_t* inputs, const int32_t* targets, int B,
                                              int T) override;
  [[nodiscard]] absl::Status backward(float dloss = 1.0f) override;
  void zero_grad() override;
  [[nodiscard]] absl::Status bind_parameters(size_t begin, size_t end, float* base) override;
  [[nodiscard]] absl::Status bind_gradients(size_t begin, size_t end, float* base) override;
  const float* logits() const override;

  [[nodiscard]] absl::Status set_part(int block_begin, int block_end, bool head) override;
  [[nodiscard]] absl::Status set_activation_slots(int n) override;
  int activation_slots() const override;
  void use_slot(int j) override;
  [[nodiscard]] absl::Status prepare(int B, int T) override;
  [[nodiscard]] absl::Status embed_forward(const int32_t* inputs) override;
  [[nodiscard]] absl::Status forward_blocks(int begin, int end) override;
  [[nodiscard]] absl::StatusOr<float> head_forward(const int32_t* targets) override;
  [[nodiscard]] absl::Status head_backward(float dloss = 1.0f) override;
  [[nodiscard]] absl::Status backward_blocks(int begin, int end,
                                             const GradientsFinal& on_final = nullptr) override;
  [[nodiscard]] absl::Status embed_backward() override;
  [[nodiscard]] absl::Status embed_backward_rows(float* rows, std::span<const int32_t> row_of,
                                                 int num_rows) override;
  float* residual(int l) override;
  float* dresidual() override;
  ModelMemory memory() const override;
  // A KV-cache decoder over this model (nn/model/decoder.h; model.h gives the contract): the
  // cache holds the KV key/value heads once (not per query head), keys rotated at their
  // absolute positions.
  [[nodiscard]] absl::StatusOr<std::unique_ptr<Decoder>> make_decoder(int batch,
                                                                      int capacity) override;

 private:
  friend class LlamaDecoder;
  Llama(const LlamaConfig& config, const ModelOptions& options, const ModelStorage& storage,
        const TensorSlice& slice);

  // Pointers into the current slot's buffer for (B_, T_). Widths are this rank's (the whole
  // model's for one rank): Q = NH/tp * hd (the attention), QKV = (NH + 2 KV)/tp * hd (the q, k, v
  // projections), I = intermediate_size/tp, Vl = Vp/tp. Per-block tensors are [L, ...] when
  // stored for every block and a single block's worth when recomputed (recompute_activations).
  struct Activations {
    float* encoded;    // [B, T, C]: residual(part begin)
    float* ln1;        // [L, B, T, C] or [B, T, C]
    float* ln1_rstd;   // [L, B, T]
    float* qkv;        // [L, B, T, QKV]: the projections, before the rotation
    float* qkvr;       // [L, B, T, 3Q] or [B, T, 3Q]: the attention's input (rope.h)
    float* atty;       // [L, B, T, Q] or [B, T, Q]
    float* att;        // [L, B, NH/tp, T] or [B, NH/tp, T]: attention's log-sum-exp per row
    float* residual2;  // [L, B, T, C]
    float* ln2;        // [L, B, T, C] or [B, T, C]
    float* ln2_rstd;   // [L, B, T]
    float* gu;         // [L, B, T, 2I]: gate and up
    float* mlp;        // [L, B, T, I] or [B, T, I]: silu(gate) * up
    float* residual3;  // [L, B, T, C]
    float* lnf;        // [B, T, C]
    float* lnf_rstd;   // [B, T]
    float* logits;     // [B, T, Vl]
    float* lse;        // [B, T]
    float* losses;     // [B, T]
  };
  // Backward's scratch; each piece is written before it is read.
  struct ActivationGradients {
    float* dresidual;  // [B, T, C]
    float* dln;        // [B, T, C]: dln1, dln2, dlnf
    float* datty;      // [B, T, Q]
    float* dqkvr;      // [B, T, 3Q]
    float* dqkv;       // [B, T, QKV]
    float* dgu;        // [B, T, 2I]
    float* dmlp;       // [B, T, I]
    float* dlogits;    // [B, T, Vl]
  };
  // One block's activation pointers; recomputed ones point at the shared single-block buffers.
  struct BlockActivations {
    float *ln1, *ln1_rstd, *qkv, *qkvr, *atty, *att, *residual2, *ln2, *ln2_rstd, *gu, *mlp,
        *residual3;
  };
  using Tensors = LlamaTensors;
  // Points the tensors of `tensors` that lie in [begin, end) at base (base + offset - begin).
  void point(Tensors& tensors, size_t begin, size_t end, float* base) const;
  // bind_parameters / bind_gradients: FailedPrecondition when `owned`, InvalidArgument when the
  // range cuts through a tensor or leaves the buffer, else point().
  absl::Status bind(Tensors& tensors, size_t begin, size_t end, float* base, bool owned,
                    const char* what);
  // Lays out the activations (gradients) for (B, T) from base and returns their size in floats;
  // with a null base only counts.
  size_t carve_activations(int B, int T, float* base, Activations* acts) const;
  size_t carve_activation_gradients(int B, int T, float* base, ActivationGradients* dacts) const;
  BlockActivations block_activations(int l) const;
  absl::Status block_forward(int l);
  void block_recompute(int l);
  absl::Status block_backward(int l, const GradientsFinal& on_final);
  // A row-parallel projection (o, down) into out [B, T, C]: summed over the group when sliced.
  absl::Status project_rows(float* out, const float* in, const float* weight, int in_channels);
  // The input gradient of a column-parallel layer (q k v, gate up, the head), a partial sum on
  // each tensor-parallel rank, summed over the group in place; nothing to do for one rank.
  absl::Status sum_over_slices(float* data, size_t count) const;
  bool sliced() const { return layout_.model().slice().size > 1; }

  LlamaConfig config_;
  ModelConfig model_config_;
  ModelOptions options_;
  ModelStorage storage_;
  LlamaLayout layout_;
  FloatBuffer params_;
  FloatBuffer grads_;
  Tensors param_tensors_;
  Tensors grad_tensors_;
  // The rotary angles: [maxT, hd/2] each (rope.h).
  std::vector<float> rope_cos_;
  std::vector<float> rope_sin_;
  // Tensor parallelism: this rank's widths (the whole model's for one rank) and the collectives.
  int local_heads_ = 0;     // NH / tp
  int local_kv_heads_ = 0;  // KV / tp
  int local_mlp_ = 0;       // I / tp
  int local_vocab_ = 0;     // Vp / tp
  int vocab_begin_ = 0;     // the first token of its rows of the embedding and head
  AllReduceFn tp_sum_;
  AllReduceFn tp_max_;

  // The part, the batch shape, the slots and their inputs and targets, the activations.
  ActivationStore<Activations, ActivationGradients> store_;
};

}  // namespace troupe::nn
