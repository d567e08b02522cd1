// GPT-2 in the style of llm.c: token + position embedding, L pre-LN blocks of causal
// self-attention and a GELU MLP, a final LayerNorm and an LM head tied to the token embedding.
// Shapes: B = batch size, T = sequence length, C = channels, NH = heads, L = layers,
// V = vocabulary, Vp = padded vocabulary (rows of wte; Vp >= V), maxT = max sequence length.
//
// The first architecture behind the model seam (nn/model/model.h, which gives the contract of
// every piece): trainers create it through nn::create_model and see it as an nn::Model. Its
// tensors and their offsets are in nn/gpt2/layout.h.
//
// Tensor parallelism (Megatron-LM): a model created with a TensorSlice holds rank r's slice of
// the parameters (nn/gpt2/layout.h) and computes its heads, its part of the MLP and its rows of
// the vocabulary (nn/layers/parallel.h), calling the group's all-reduces (set_tensor_parallel)
// where the math needs the whole: twice per block in forward and twice in backward, once in the
// embedding, and in the head (the loss's max and sums, and the gradient of its input). Every rank
// of the group runs the same pieces on the same inputs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nn/gpt2/layout.h"
#include "nn/layers/parallel.h"
#include "nn/memory.h"
#include "nn/model/activation_store.h"
#include "nn/model/model.h"

namespace troupe::nn {

// GPT's recomputation (ModelOptions::recompute_activations): the forward keeps per block only
// ln1/ln2's mean and rstd, qkv, fch and the two residual sums; backward recomputes, block by block
// into one block's buffers, the LayerNorm outputs (ln1, ln2), the attention output and its row
// log-sum-exps (atty, att) and the GELU output (fch_gelu). That saves (L - 1) * (7*B*T*C + B*NH*T)
// floats for two LayerNorms, one attention and one GELU forward per block in backward.

// One model replica on the CPU. Not thread-safe: one caller at a time (the kernels themselves run
// on num_threads() threads, threads.h). Deterministic: the same inputs and parameters give bitwise
// the same logits, loss and gradients for a fixed thread count.
class GPT final : public Model {
 public:
  // InvalidArgument when the config is not a valid model (see GPTConfig::validate) or does not
  // split into the slice (validate_slice), ResourceExhausted without the memory. Parameters and
  // gradients are zero; activations are allocated by the first forward (or prepare).
  [[nodiscard]] static absl::StatusOr<GPT> create(const GPTConfig& config,
                                                  const ModelOptions& options = {},
                                                  const ModelStorage& storage = {},
                                                  const TensorSlice& slice = {});

  GPT(GPT&&) = default;
  GPT& operator=(GPT&&) = default;

  const ModelConfig& config() const override { return model_config_; }
  const GPTConfig& gpt_config() const { return config_; }
  const ModelOptions& options() const override { return options_; }
  const ModelLayout& layout() const override { return layout_.model(); }

  // The tensor-parallel group's element-wise sum and max all-reduces (nn/layers/parallel.h gives
  // their contract). REQUIRED before the first piece runs when tensor_slice().size > 1; a
  // collective's error ends the piece that called it with that error.
  void set_tensor_parallel(AllReduceFn allreduce_sum, AllReduceFn allreduce_max) override;

  // The range [begin, end) of what init_parameters(seed) gives a model of `config`, into `out`
  // (end - begin floats), without the memory for the rest: a parameter shard initialises its
  // partition. REQUIRES: config.validate() is OK; begin <= end <= the number of parameters.
  static void init_parameters(const GPTConfig& config, uint64_t seed, size_t begin, size_t end,
                              float* out);
  // The same for tensor-parallel rank `slice`: the range [begin, end) of its layout of the slice
  // of what init_parameters(seed) gives the whole model. (It draws the whole model's values.)
  static void init_parameters(const GPTConfig& config, const TensorSlice& slice, uint64_t seed,
                              size_t begin, size_t end, float* out);

  // GPT-2's initialisation, reproducible from seed: wte (rows < V), wpe, qkvw and fcw normal(0,
  // 0.02); attprojw and fcprojw normal(0, 0.02 / sqrt(2L)); LayerNorm weights 1; biases and the
  // padding rows of wte 0. A tensor-parallel rank gets its slice of the whole model's values.
  void init_parameters(uint64_t seed) override;

  // The flat buffers: num_params() floats each, laid out as param_layout() says. The caller may
  // read and write them between calls (loading a checkpoint, an optimizer step). Null for a
  // buffer the model does not own (ModelStorage).
  float* params() override { return params_.data(); }
  const float* params() const { return params_.data(); }
  float* grads() override { return grads_.data(); }
  const float* grads() const { return grads_.data(); }
  const GPTParamLayout& param_layout() const { return layout_; }
  // Pointers to each tensor of params() / grads().
  const GPTTensors& param_tensors() const { return param_tensors_; }
  const GPTTensors& grad_tensors() const { return grad_tensors_; }

  // Runs the model on inputs [B, T] (token ids < V). With targets [B, T] (ids < V) returns the
  // mean cross-entropy over the B*T positions and readies backward(); without (null) returns NaN
  // and only the logits are computed. Inputs and targets are copied.
  // InvalidArgument when B < 1, T < 1, T > maxT or a token id is out of range (nothing is run);
  // ResourceExhausted when the activations for a larger (B, T) cannot be allocated.
  [[nodiscard]] absl::StatusOr<float> forward(const int32_t* inputs, const int32_t* targets, int B,
                                              int T) override;

  // Accumulates into grads() the gradient of dloss * (the last forward's loss): dloss = 1 for a
  // plain step, 1/n to average n accumulated micro-batches. Gradients accumulate until
  // zero_grad(). FailedPrecondition unless the last forward had targets.
  [[nodiscard]] absl::Status backward(float dloss = 1.0f) override;

  // Sets every gradient to zero (of the model's own gradient buffer; bound gradients are the
  // caller's to clear).
  void zero_grad() override;

  // Points the parameter (gradient) tensors that lie in [begin, end) of the flat layout at
  // `base`, which holds that range laid out as the flat buffer does (the tensor at offset o reads
  // base + o - begin); it stays owned by the caller and must outlive its use. May be called
  // between any two pieces of forward and backward; a piece REQUIRES every tensor it reads or
  // writes to be bound. Gradients accumulate into what is bound, as into the model's own.
  // FailedPrecondition if the model owns that buffer; InvalidArgument if [begin, end) cuts
  // through a tensor or leaves the buffer.
  [[nodiscard]] absl::Status bind_parameters(size_t begin, size_t end, float* base) override;
  [[nodiscard]] absl::Status bind_gradients(size_t begin, size_t end, float* base) override;

  // logits [B, T, Vp] of the last forward (columns [V, Vp) are the padding's, not part of the
  // softmax); a tensor-parallel rank's [B, T, Vp/tp], its columns of the vocabulary. Valid until
  // the next forward.
  const float* logits() const override { return store_.acts().logits; }

  // --- Pieces of forward() and backward(), for pipeline stages that own blocks [begin, end). ---
  // forward()  = prepare(B, T); embed_forward(inputs); forward_blocks(0, L); head_forward(targets)
  // backward() = head_backward(dloss); backward_blocks(0, L); embed_backward()
  // A stage that does not start at block 0 writes the activation it receives into residual(begin)
  // before forward_blocks, and sends residual(end) onwards; in backward it writes the gradient it
  // receives for residual(end) into dresidual() and, after backward_blocks, sends dresidual()
  // (then the gradient for residual(begin)) back. Each piece REQUIRES the pieces before it ran for
  // the current (B, T); the checked errors are as for forward() / backward().

  // Keeps activations only for blocks [block_begin, block_end), and for the head (lnf, logits,
  // loss) only when `head`: a pipeline stage's part of the model. The whole model by default.
  // Then residual(l) exists for l in [block_begin, block_end]; embed_forward needs block_begin
  // = 0, the head block_end = L; every piece outside the part is FailedPrecondition. Takes effect
  // at the next prepare(). InvalidArgument unless 0 <= block_begin < block_end <= L and, with
  // `head`, block_end = L.
  [[nodiscard]] absl::Status set_part(int block_begin, int block_end, bool head) override;
  // Holds `n` sets of activations, one for each micro-batch between its forward and its backward
  // (a pipeline schedule has several in flight); use_slot(j) makes set j the one every piece reads
  // and writes, with the inputs and targets its forward took. Backward's scratch is shared: a
  // backward runs start to end on one slot. Takes effect at the next prepare(); set 0 is current.
  // InvalidArgument unless n >= 1.
  [[nodiscard]] absl::Status set_activation_slots(int n) override;
  int activation_slots() const override { return store_.slots(); }
  // REQUIRES: 0 <= j < activation_slots().
  void use_slot(int j) override;

  // Sizes the activations for (B, T) (growing them if needed) and makes (B, T) current.
  [[nodiscard]] absl::Status prepare(int B, int T) override;
  // residual(0) = wte[inputs] + wpe. Copies inputs (for embed_backward).
  [[nodiscard]] absl::Status embed_forward(const int32_t* inputs) override;
  // residual(l + 1) = block l (residual(l)) for l in [begin, end).
  [[nodiscard]] absl::Status forward_blocks(int begin, int end) override;
  // logits from residual(L); with targets, returns the mean loss (else NaN).
  [[nodiscard]] absl::StatusOr<float> head_forward(const int32_t* targets) override;
  // Sets dresidual() to the gradient for residual(L) and accumulates lnf's and wte's gradients.
  [[nodiscard]] absl::Status head_backward(float dloss = 1.0f) override;
  // For l from end - 1 down to begin: accumulates block l's parameter gradients and turns
  // dresidual() from the gradient for residual(l + 1) into the one for residual(l).
  //
  // `on_final`, when set, is called each time a layer of a block has finished its parameters'
  // gradients, with the offset of that layer's first tensor: for block l its fcproj, fc, ln2,
  // attproj, qkv and ln1, in that order (descending offsets; ln1's is block_begin(l)). From that
  // offset up to block_begin(end) every gradient is final for this backward; data parallelism
  // starts reducing them there.
  [[nodiscard]] absl::Status backward_blocks(int begin, int end,
                                             const GradientsFinal& on_final = nullptr) override;
  // Accumulates wte's and wpe's gradients from dresidual() (the gradient for residual(0)).
  [[nodiscard]] absl::Status embed_backward() override;
  // embed_backward() with the token embeddings' gradient accumulated into `rows` [num_rows, C]
  // instead of wte's: token v's row is rows[row_of[v]]. wpe's gradient accumulates as in
  // embed_backward(). Data parallelism reduces the few rows a batch touches this way, apart
  // from the LM head's dense share of wte's gradient, which head_backward() finished long before.
  // REQUIRES: row_of.size() >= vocab_size; row_of[v] in [0, num_rows) for every token v of the
  // current batch (checked: InvalidArgument naming the token, and nothing accumulated);
  // FailedPrecondition on a tensor-parallel rank (tp > 1).
  [[nodiscard]] absl::Status embed_backward_rows(float* rows, std::span<const int32_t> row_of,
                                                 int num_rows) override;

  // The residual stream [B, T, C] entering block l, l in [0, L] (in the part: set_part);
  // residual(L) is the last block's output. REQUIRES: prepare() ran.
  float* residual(int l) override;
  // The gradient of the residual stream [B, T, C] at the block boundary backward last reached.
  float* dresidual() override { return store_.grads().dresidual; }

  // What this model holds now.
  ModelMemory memory() const override;

  // A KV-cache decoder over this model (nn/model/decoder.h; model.h gives the contract).
  [[nodiscard]] absl::StatusOr<std::unique_ptr<Decoder>> make_decoder(int batch,
                                                                      int capacity) override;

 private:
  GPT(const GPTConfig& config, const ModelOptions& options, const ModelStorage& storage,
      const TensorSlice& slice);

  // Pointers into the current slot's buffer for (B_, T_). Per-block tensors are [L, ...] when
  // stored for every block and a single block's worth when recomputed (see ModelOptions).
  struct Activations {
    float* encoded;    // [B, T, C]
    float* ln1;        // [L, B, T, C] or [B, T, C]
    float* ln1_mean;   // [L, B, T]
    float* ln1_rstd;   // [L, B, T]
    float* qkv;        // [L, B, T, 3C]
    float* atty;       // [L, B, T, C] or [B, T, C]
    float* att;        // [L, B, NH, T] or [B, NH, T]: attention's log-sum-exp per row
    float* residual2;  // [L, B, T, C]
    float* ln2;        // [L, B, T, C] or [B, T, C]
    float* ln2_mean;   // [L, B, T]
    float* ln2_rstd;   // [L, B, T]
    float* fch;        // [L, B, T, 4C]
    float* fch_gelu;   // [L, B, T, 4C] or [B, T, 4C]
    float* residual3;  // [L, B, T, C]
    float* lnf;        // [B, T, C]
    float* lnf_mean;   // [B, T]
    float* lnf_rstd;   // [B, T]
    float* logits;     // [B, T, Vp]
    float* lse;        // [B, T]
    float* losses;     // [B, T]
  };
  // Backward's scratch; each piece is zeroed before the kernels accumulate into it.
  struct ActivationGradients {
    float* dresidual;  // [B, T, C]
    float* dln;        // [B, T, C]: dln1, dln2, dlnf
    float* datty;      // [B, T, C]
    float* dqkv;       // [B, T, 3C]
    float* dfch;       // [B, T, 4C]
    float* dfch_gelu;  // [B, T, 4C]
    float* dlogits;    // [B, T, Vp]
  };
  // One block's activation pointers; recomputed ones point at the shared single-block buffers.
  struct BlockActivations {
    float *ln1, *ln1_mean, *ln1_rstd, *qkv, *atty, *att, *residual2, *ln2, *ln2_mean, *ln2_rstd,
        *fch, *fch_gelu, *residual3;
  };

  // Lays out the activations (gradients) for (B, T) from base and returns their size in floats;
  // with a null base only counts.
  size_t carve_activations(int B, int T, float* base, Activations* acts) const;
  size_t carve_activation_gradients(int B, int T, float* base, ActivationGradients* dacts) const;
  BlockActivations block_activations(int l) const;
  absl::Status block_forward(int l);
  void block_recompute(int l);
  absl::Status block_backward(int l, const GradientsFinal& on_final);
  // The input gradient of a column-parallel layer (qkv, fc, the head), a partial sum on each
  // tensor-parallel rank, summed over the group in place; nothing to do for one rank.
  absl::Status sum_over_slices(float* data, size_t count) const;
  bool sliced() const { return layout_.slice().size > 1; }

  GPTConfig config_;
  ModelConfig model_config_;
  ModelOptions options_;
  ModelStorage storage_;
  GPTParamLayout layout_;
  FloatBuffer params_;
  FloatBuffer grads_;
  GPTTensors param_tensors_;
  GPTTensors grad_tensors_;
  // Tensor parallelism: this rank's widths (the whole model's for one rank) and the collectives.
  int local_channels_ = 0;  // C / tp: the attention's and projections' width
  int local_heads_ = 0;     // NH / tp
  int local_vocab_ = 0;     // Vp / tp
  int vocab_begin_ = 0;     // the first token of its rows of wte
  AllReduceFn tp_sum_;
  AllReduceFn tp_max_;

  // The part, the batch shape, the slots and their inputs and targets, the activations.
  ActivationStore<Activations, ActivationGradients> store_;
};

}  // namespace troupe::nn
