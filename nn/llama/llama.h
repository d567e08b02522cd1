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
// row-parallel) and Vp/tp rows of the vocabulary in the embedding and the head.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nn/llama/config.h"
#include "nn/llama/layout.h"
#include "nn/memory.h"
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

 private:
  Llama(const LlamaConfig& config, const ModelOptions& options, const ModelStorage& storage,
        const TensorSlice& slice);

  LlamaConfig config_;
  ModelConfig model_config_;
  ModelOptions options_;
  ModelStorage storage_;
  LlamaLayout layout_;
  FloatBuffer params_;
  FloatBuffer grads_;
};

}  // namespace troupe::nn
