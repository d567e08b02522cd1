// nn/cuda/llama.h: nn/llama's passes (nn/llama/passes.cc) on the device, layer for layer. The
// embedding is the GPT encoder's kernel with a zero position table (x + 0 is x); the attention is
// GPT's over rope_qkv_forward's packing, every query head beside its own copy of its group's key
// and value, as on the CPU. Backward scratch is zeroed before layers that accumulate into it.
#include "nn/cuda/llama.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "nn/cuda/context.h"
#include "nn/cuda/cuda_model.h"
#include "nn/cuda/layers.h"
#include "nn/layers/rope.h"
#include "nn/llama/layout.h"
#include "nn/llama/llama.h"
#include "nn/memory.h"

namespace troupe::nn::cuda {
namespace {

struct LlamaActivations {
  float *encoded, *ln1, *ln1_rstd, *qkv, *qkvr, *atty, *att, *residual2, *ln2, *ln2_rstd, *gu, *mlp,
      *residual3, *lnf, *lnf_rstd, *logits, *lse, *losses, *loss;
};
struct LlamaActivationGradients {
  float *dresidual, *dln, *datty, *dqkvr, *dqkv, *dgu, *dmlp, *dlogits, *datt;
};

class CudaLlama final : public CudaModel<LlamaActivations, LlamaActivationGradients> {
 public:
  static absl::StatusOr<std::unique_ptr<Model>> create(int device, const LlamaConfig& config,
                                                       const ModelOptions& options,
                                                       const ModelStorage& storage,
                                                       const TensorSlice& slice) {
    if (absl::Status s = config.validate(); !s.ok()) return s;
    if (absl::Status s = validate_slice(config, slice); !s.ok()) return s;
    if (slice.size > 1) {
      return absl::FailedPreconditionError(
          "Llama on cuda: tensor parallelism (a slice of more than one rank) is not built for "
          "CUDA yet");
    }
    if (options.recompute_activations) {
      return absl::FailedPreconditionError(
          "Llama on cuda: recomputed activations (model.recompute_activations) are not built "
          "for CUDA yet");
    }
    absl::StatusOr<cudaStream_t> stream = device_stream(device);
    if (!stream.ok()) return stream.status();
    absl::StatusOr<Cublas> blas = Cublas::create(gemm_inputs(options.matmul));
    if (!blas.ok()) return blas.status();
    std::unique_ptr<CudaLlama> m(
        new CudaLlama(device, *stream, *std::move(blas), config, options, storage, slice));
    const size_t n = m->layout_.num_params();
    if (storage.parameters) {
      TROUPE_CUDA_RETURN_IF_ERROR(
          m->params_.reset(MemoryCategory::kParameters, n, true, m->device_));
      m->point(m->param_tensors_, 0, n, m->params_.data());
    }
    if (storage.gradients) {
      TROUPE_CUDA_RETURN_IF_ERROR(m->grads_.reset(MemoryCategory::kGradients, n, true, m->device_));
      m->point(m->grad_tensors_, 0, n, m->grads_.data());
    }
    // The rotary angles and the embedding's zero position table, on the device.
    const int hd = config.head_dim(), maxT = config.max_position_embeddings;
    std::vector<float> cos(static_cast<size_t>(maxT) * (hd / 2)), sin(cos.size());
    rope_table(cos.data(), sin.data(), maxT, hd, config.rope_theta);
    TROUPE_CUDA_RETURN_IF_ERROR(
        m->tables_.reset(MemoryCategory::kOther, 2 * cos.size(), false, m->device_));
    const auto bytes = static_cast<int64_t>(cos.size() * sizeof(float));
    TROUPE_CUDA_RETURN_IF_ERROR(
        copy_bytes(m->tables_.data(), m->device_, cos.data(), Device::cpu(), bytes));
    TROUPE_CUDA_RETURN_IF_ERROR(
        copy_bytes(m->tables_.data() + cos.size(), m->device_, sin.data(), Device::cpu(), bytes));
    const size_t positions = static_cast<size_t>(maxT) * config.hidden_size;
    TROUPE_CUDA_RETURN_IF_ERROR(
        m->zero_positions_.reset(MemoryCategory::kOther, positions, true, m->device_));
    TROUPE_CUDA_RETURN_IF_ERROR(
        m->position_grads_.reset(MemoryCategory::kOther, positions, true, m->device_));
    return std::unique_ptr<Model>(std::move(m));
  }

  const ModelConfig& config() const override { return model_config_; }
  const ModelOptions& options() const override { return options_; }
  const ModelLayout& layout() const override { return layout_.model(); }

  void init_parameters(uint64_t seed) override {
    if (params_.data() == nullptr) return;  // bound parameters are the caller's to fill
    std::vector<float> host(num_params());
    Llama::init_parameters(config_, layout_.model().slice(), seed, 0, host.size(), host.data());
    (void)copy_bytes(params_.data(), device_, host.data(), Device::cpu(),
                     static_cast<int64_t>(host.size() * sizeof(float)));
  }

  float* params() override { return params_.data(); }
  float* grads() override { return grads_.data(); }

  absl::StatusOr<float> forward(const int32_t* inputs, const int32_t* targets, int B,
                                int T) override {
    TROUPE_CUDA_RETURN_IF_ERROR(prepare(B, T));
    const size_t BT = static_cast<size_t>(B) * T;
    TROUPE_CUDA_RETURN_IF_ERROR(check_tokens(kName, inputs, BT, config_.vocab_size, "inputs"));
    if (targets != nullptr) {
      TROUPE_CUDA_RETURN_IF_ERROR(check_tokens(kName, targets, BT, config_.vocab_size, "targets"));
    }
    TROUPE_CUDA_RETURN_IF_ERROR(embed_forward(inputs));
    TROUPE_CUDA_RETURN_IF_ERROR(forward_blocks(0, config_.num_hidden_layers));
    return head_forward(targets);
  }

  absl::Status backward(float dloss) override {
    TROUPE_CUDA_RETURN_IF_ERROR(head_backward(dloss));
    TROUPE_CUDA_RETURN_IF_ERROR(backward_blocks(0, config_.num_hidden_layers, nullptr));
    return embed_backward();
  }

  void zero_grad() override {
    if (grads_.data() != nullptr) (void)zero(grads_.data(), grads_.size());
  }

  absl::Status bind_parameters(size_t begin, size_t end, float* base) override {
    return bind(param_tensors_, begin, end, base, storage_.parameters, "parameters");
  }
  absl::Status bind_gradients(size_t begin, size_t end, float* base) override {
    return bind(grad_tensors_, begin, end, base, storage_.gradients, "gradients");
  }

  const float* logits() const override { return store_.acts().logits; }

  absl::Status prepare(int B, int T) override {
    const int maxT = config_.max_position_embeddings;
    if (B < 1 || T < 1 || T > maxT) {
      return absl::InvalidArgumentError(
          absl::StrCat(kName, ": batch B = ", B, ", T = ", T,
                       " needs B >= 1 and 1 <= T <= max_position_embeddings = ", maxT));
    }
    const int64_t BT = int64_t{B} * T;
    const int64_t widest =
        std::max<int64_t>({2 * int64_t{config_.intermediate_size}, config_.padded_vocab(),
                           3 * int64_t{config_.num_attention_heads} * config_.head_dim()});
    if (BT * widest > INT_MAX || BT * config_.num_attention_heads * T > INT_MAX) {
      return absl::InvalidArgumentError(absl::StrCat(kName, ": batch B = ", B, ", T = ", T,
                                                     " makes an activation over INT_MAX elements"));
    }
    return prepare_store(
        B, T, [&](float* base, LlamaActivations* a) { return carve_activations(B, T, base, a); },
        [&](float* base, LlamaActivationGradients* d) { return carve_gradients(B, T, base, d); });
  }

  absl::Status embed_forward(const int32_t* inputs) override {
    TROUPE_CUDA_RETURN_IF_ERROR(store_.check_prepared("embed_forward"));
    if (store_.part_begin() != 0) {
      return absl::FailedPreconditionError(
          absl::StrCat(kName, "::embed_forward: its part starts at block ", store_.part_begin()));
    }
    TROUPE_CUDA_RETURN_IF_ERROR(
        check_tokens(kName, inputs, store_.BT(), config_.vocab_size, "inputs"));
    store_.set_inputs(inputs);
    TROUPE_CUDA_RETURN_IF_ERROR(upload_tokens(device_inputs(), inputs));
    return encoder_forward(store_.acts().encoded, device_inputs(), param_tensors_.embed_tokens(),
                           zero_positions_.data(), store_.B(), store_.T(), config_.hidden_size,
                           stream_);
  }

  absl::Status forward_blocks(int begin, int end) override {
    TROUPE_CUDA_RETURN_IF_ERROR(store_.check_blocks(begin, end, "forward_blocks"));
    for (int l = begin; l < end; ++l)
      TROUPE_CUDA_RETURN_IF_ERROR(block_forward(l));
    return absl::OkStatus();
  }

  absl::StatusOr<float> head_forward(const int32_t* targets) override {
    TROUPE_CUDA_RETURN_IF_ERROR(store_.check_prepared("head_forward"));
    if (!store_.part_head()) {
      return absl::FailedPreconditionError(
          absl::StrCat(kName, "::head_forward: its part has no head (set_part)"));
    }
    const int B = store_.B(), T = store_.T(), C = config_.hidden_size;
    if (targets != nullptr) {
      TROUPE_CUDA_RETURN_IF_ERROR(
          check_tokens(kName, targets, store_.BT(), config_.vocab_size, "targets"));
    }
    const LlamaActivations& a = store_.acts();
    TROUPE_CUDA_RETURN_IF_ERROR(rmsnorm_forward(a.lnf, a.lnf_rstd,
                                                residual(config_.num_hidden_layers),
                                                param_tensors_.norm(), B, T, C, eps(), stream_));
    TROUPE_CUDA_RETURN_IF_ERROR(linear_forward(blas_, a.logits, a.lnf, param_tensors_.lm_head(),
                                               nullptr, B, T, C, config_.padded_vocab(), stream_));
    if (targets == nullptr) {
      store_.clear_targets();
      return std::numeric_limits<float>::quiet_NaN();
    }
    store_.set_targets(targets);
    TROUPE_CUDA_RETURN_IF_ERROR(upload_tokens(device_targets(), targets));
    TROUPE_CUDA_RETURN_IF_ERROR(crossentropy_forward(a.loss, a.losses, a.lse, a.logits,
                                                     device_targets(), B, T, config_.vocab_size,
                                                     config_.padded_vocab(), stream_));
    return download_loss(a.loss);
  }

  absl::Status head_backward(float dloss) override {
    if (!store_.have_targets()) {
      return absl::FailedPreconditionError(absl::StrCat(
          kName, "::backward: the last forward had no targets; run forward with targets first"));
    }
    const int B = store_.B(), T = store_.T(), C = config_.hidden_size;
    const int V = config_.vocab_size, Vp = config_.padded_vocab();
    const size_t BT = store_.BT(), BTC = BT * C;
    const LlamaActivations& a = store_.acts();
    const LlamaActivationGradients& d = store_.grads();
    TROUPE_CUDA_RETURN_IF_ERROR(zero(d.dlogits, BT * Vp));
    TROUPE_CUDA_RETURN_IF_ERROR(crossentropy_backward(d.dlogits, dloss, a.logits, a.lse,
                                                      device_targets(), B, T, V, Vp, stream_));
    // A tied head's weight gradient accumulates into the embedding's.
    TROUPE_CUDA_RETURN_IF_ERROR(zero(d.dln, BTC));
    TROUPE_CUDA_RETURN_IF_ERROR(linear_backward(blas_, d.dln, grad_tensors_.lm_head(), nullptr,
                                                d.dlogits, a.lnf, param_tensors_.lm_head(), B, T, C,
                                                Vp, stream_));
    TROUPE_CUDA_RETURN_IF_ERROR(zero(d.dresidual, BTC));
    return rmsnorm_backward(d.dresidual, grad_tensors_.norm(), d.dln,
                            residual(config_.num_hidden_layers), param_tensors_.norm(), a.lnf_rstd,
                            B, T, C, stream_);
  }

  absl::Status backward_blocks(int begin, int end, const GradientsFinal& on_final) override {
    TROUPE_CUDA_RETURN_IF_ERROR(store_.check_blocks(begin, end, "backward_blocks"));
    for (int l = end - 1; l >= begin; --l)
      TROUPE_CUDA_RETURN_IF_ERROR(block_backward(l, on_final));
    return absl::OkStatus();
  }

  absl::Status embed_backward() override {
    TROUPE_CUDA_RETURN_IF_ERROR(store_.check_inputs("embed_backward"));
    // The zero position table's gradient is scratch, never read.
    TROUPE_CUDA_RETURN_IF_ERROR(zero(position_grads_.data(), position_grads_.size()));
    return encoder_backward(grad_tensors_.embed_tokens(), position_grads_.data(),
                            store_.grads().dresidual, device_inputs(), store_.B(), store_.T(),
                            config_.hidden_size, stream_);
  }

  float* residual(int l) override {
    const size_t BTC = store_.BT() * config_.hidden_size;
    const int begin = store_.part_begin();
    return l == begin ? store_.acts().encoded : store_.acts().residual3 + (l - 1 - begin) * BTC;
  }
  float* dresidual() override { return store_.grads().dresidual; }

  ModelMemory memory() const override { return memory_of(params_.bytes(), grads_.bytes()); }

 private:
  static constexpr const char* kName = "Llama on cuda";

  // Pointers to each tensor of one buffer, by index in layout().tensors() (nn/llama/llama.h's).
  struct Tensors {
    std::vector<float*> at;
    bool tied = false;
    float* embed_tokens() const { return at.front(); }
    float* block(int l, LlamaTensor t) const {
      return at[1 + static_cast<size_t>(l) * kNumLlamaBlockTensors + static_cast<size_t>(t)];
    }
    float* norm() const { return at[at.size() - (tied ? 1 : 2)]; }
    float* lm_head() const { return tied ? at.front() : at.back(); }
  };
  struct BlockActivations {
    float *ln1, *ln1_rstd, *qkv, *qkvr, *atty, *att, *residual2, *ln2, *ln2_rstd, *gu, *mlp,
        *residual3;
  };

  CudaLlama(int device, cudaStream_t stream, Cublas blas, const LlamaConfig& config,
            const ModelOptions& options, const ModelStorage& storage, const TensorSlice& slice)
      : CudaModel(kName, config.num_hidden_layers, Device::cuda(device), stream, std::move(blas)),
        config_(config),
        model_config_(config),
        options_(options),
        storage_(storage),
        layout_(config, slice) {
    storage_.device = device_;
    const size_t tensors = layout_.model().tensors().size();
    param_tensors_ = {std::vector<float*>(tensors, nullptr), config.tie_word_embeddings};
    grad_tensors_ = param_tensors_;
  }

  float eps() const { return static_cast<float>(config_.rms_norm_eps); }
  const float* rope_cos() const { return tables_.data(); }
  const float* rope_sin() const { return tables_.data() + tables_.size() / 2; }

  void point(Tensors& tensors, size_t begin, size_t end, float* base) const {
    const std::vector<ParamTensor>& all = layout().tensors();
    for (size_t i = 0; i < all.size(); ++i) {
      const ParamTensor& t = all[i];
      if (t.offset < begin || t.offset + t.size > end || t.size == 0) continue;
      tensors.at[i] = base + (t.offset - begin);
    }
  }
  absl::Status bind(Tensors& tensors, size_t begin, size_t end, float* base, bool owned,
                    const char* what) {
    if (owned) {
      return absl::FailedPreconditionError(
          absl::StrCat(kName, "::bind_", what, ": the model owns its ", what));
    }
    if (absl::Status s = layout().check_range(begin, end); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(kName, "::bind_", what, ": ", s.message()));
    }
    point(tensors, begin, end, base);
    return absl::OkStatus();
  }

  // Per slot, every block of the part keeps all it computed (attention's whole probabilities:
  // [B, NH, T, T] a block), the head its logits and loss.
  size_t carve_activations(int B, int T, float* base, LlamaActivations* acts) const {
    const size_t C = config_.hidden_size, hd = config_.head_dim();
    const size_t NH = config_.num_attention_heads, KV = config_.kv_heads();
    const size_t Q = NH * hd, QKV = (NH + 2 * KV) * hd, I = config_.intermediate_size;
    const auto L = static_cast<size_t>(store_.part_end() - store_.part_begin());
    const size_t BT = static_cast<size_t>(B) * T, BTC = BT * C;
    const size_t HBT = store_.part_head() ? BT : 0;
    const size_t Vp = store_.part_head() ? static_cast<size_t>(config_.padded_vocab()) : 0;
    AlignedCarver c(base);
    LlamaActivations a;
    a.encoded = c.take(BTC);
    a.ln1 = c.take(L * BTC);
    a.ln1_rstd = c.take(L * BT);
    a.qkv = c.take(L * BT * QKV);
    a.qkvr = c.take(L * BT * 3 * Q);
    a.atty = c.take(L * BT * Q);
    a.att = c.take(L * BT * NH * static_cast<size_t>(T));
    a.residual2 = c.take(L * BTC);
    a.ln2 = c.take(L * BTC);
    a.ln2_rstd = c.take(L * BT);
    a.gu = c.take(L * BT * 2 * I);
    a.mlp = c.take(L * BT * I);
    a.residual3 = c.take(L * BTC);
    a.lnf = c.take(HBT * C);
    a.lnf_rstd = c.take(HBT);
    a.logits = c.take(HBT * Vp);
    a.lse = c.take(HBT);
    a.losses = c.take(HBT);
    a.loss = c.take(store_.part_head() ? 1 : 0);
    if (acts != nullptr) *acts = a;
    return c.used();
  }

  size_t carve_gradients(int B, int T, float* base, LlamaActivationGradients* dacts) const {
    const size_t C = config_.hidden_size, hd = config_.head_dim();
    const size_t NH = config_.num_attention_heads, KV = config_.kv_heads();
    const size_t Q = NH * hd, QKV = (NH + 2 * KV) * hd, I = config_.intermediate_size;
    const size_t BT = static_cast<size_t>(B) * T;
    AlignedCarver c(base);
    LlamaActivationGradients d;
    d.dresidual = c.take(BT * C);
    d.dln = c.take(BT * C);
    d.datty = c.take(BT * Q);
    d.dqkvr = c.take(BT * 3 * Q);
    d.dqkv = c.take(BT * QKV);
    d.dgu = c.take(BT * 2 * I);
    d.dmlp = c.take(BT * I);
    d.dlogits = c.take(store_.part_head() ? BT * config_.padded_vocab() : 0);
    d.datt = c.take(BT * NH * static_cast<size_t>(T));
    if (dacts != nullptr) *dacts = d;
    return c.used();
  }

  BlockActivations block_activations(int block) const {
    const size_t C = config_.hidden_size, hd = config_.head_dim();
    const size_t NH = config_.num_attention_heads, KV = config_.kv_heads();
    const size_t Q = NH * hd, QKV = (NH + 2 * KV) * hd, I = config_.intermediate_size;
    const size_t BT = store_.BT(), BTC = BT * C;
    const auto l = static_cast<size_t>(block - store_.part_begin());
    const LlamaActivations& a = store_.acts();
    return {a.ln1 + l * BTC,       a.ln1_rstd + l * BT,
            a.qkv + l * BT * QKV,  a.qkvr + l * BT * 3 * Q,
            a.atty + l * BT * Q,   a.att + l * BT * NH * static_cast<size_t>(store_.T()),
            a.residual2 + l * BTC, a.ln2 + l * BTC,
            a.ln2_rstd + l * BT,   a.gu + l * BT * 2 * I,
            a.mlp + l * BT * I,    a.residual3 + l * BTC};
  }

  absl::Status block_forward(int l) {
    const int B = store_.B(), T = store_.T(), C = config_.hidden_size, hd = config_.head_dim();
    const int NH = config_.num_attention_heads, KV = config_.kv_heads();
    const int I = config_.intermediate_size, Q = NH * hd, QKV = (NH + 2 * KV) * hd;
    const size_t BTC = store_.BT() * C;
    const BlockActivations a = block_activations(l);
    auto w = [&](LlamaTensor t) { return param_tensors_.block(l, t); };
    const float* inp = residual(l);
    TROUPE_CUDA_RETURN_IF_ERROR(rmsnorm_forward(a.ln1, a.ln1_rstd, inp, w(LlamaTensor::kInputNorm),
                                                B, T, C, eps(), stream_));
    // q, k and v are one GEMM, gate and up another: their weights are consecutive in the layout.
    TROUPE_CUDA_RETURN_IF_ERROR(
        linear_forward(blas_, a.qkv, a.ln1, w(LlamaTensor::kQ), nullptr, B, T, C, QKV, stream_));
    TROUPE_CUDA_RETURN_IF_ERROR(
        rope_qkv_forward(a.qkvr, a.qkv, rope_cos(), rope_sin(), B, T, NH, KV, hd, stream_));
    TROUPE_CUDA_RETURN_IF_ERROR(
        attention_forward(blas_, a.atty, a.att, a.qkvr, B, T, Q, NH, stream_));
    TROUPE_CUDA_RETURN_IF_ERROR(linear_forward(blas_, a.residual2, a.atty, w(LlamaTensor::kO),
                                               nullptr, B, T, Q, C, stream_));
    TROUPE_CUDA_RETURN_IF_ERROR(residual_forward(a.residual2, inp, a.residual2, BTC, stream_));
    TROUPE_CUDA_RETURN_IF_ERROR(rmsnorm_forward(
        a.ln2, a.ln2_rstd, a.residual2, w(LlamaTensor::kPostNorm), B, T, C, eps(), stream_));
    TROUPE_CUDA_RETURN_IF_ERROR(linear_forward(blas_, a.gu, a.ln2, w(LlamaTensor::kGate), nullptr,
                                               B, T, C, 2 * I, stream_));
    TROUPE_CUDA_RETURN_IF_ERROR(swiglu_forward(a.mlp, a.gu, B, T, I, stream_));
    TROUPE_CUDA_RETURN_IF_ERROR(linear_forward(blas_, a.residual3, a.mlp, w(LlamaTensor::kDown),
                                               nullptr, B, T, I, C, stream_));
    return residual_forward(a.residual3, a.residual2, a.residual3, BTC, stream_);
  }

  absl::Status block_backward(int l, const GradientsFinal& on_final) {
    const int B = store_.B(), T = store_.T(), C = config_.hidden_size, hd = config_.head_dim();
    const int NH = config_.num_attention_heads, KV = config_.kv_heads();
    const int I = config_.intermediate_size, Q = NH * hd, QKV = (NH + 2 * KV) * hd;
    const size_t BT = store_.BT(), BTC = BT * C;
    const BlockActivations a = block_activations(l);
    const LlamaActivationGradients& d = store_.grads();
    auto w = [&](LlamaTensor t) { return param_tensors_.block(l, t); };
    auto dw = [&](LlamaTensor t) { return grad_tensors_.block(l, t); };
    auto finished = [&](LlamaTensor first_tensor) {
      return report_final(on_final, layout_.block_tensor(l, first_tensor));
    };
    // d.dresidual holds d residual3 (= d down), and becomes d residual(l) as on the CPU.
    TROUPE_CUDA_RETURN_IF_ERROR(zero(d.dmlp, BT * I));
    TROUPE_CUDA_RETURN_IF_ERROR(linear_backward(blas_, d.dmlp, dw(LlamaTensor::kDown), nullptr,
                                                d.dresidual, a.mlp, w(LlamaTensor::kDown), B, T, I,
                                                C, stream_));
    TROUPE_CUDA_RETURN_IF_ERROR(finished(LlamaTensor::kDown));
    TROUPE_CUDA_RETURN_IF_ERROR(swiglu_backward(d.dgu, d.dmlp, a.gu, B, T, I, stream_));
    TROUPE_CUDA_RETURN_IF_ERROR(zero(d.dln, BTC));
    TROUPE_CUDA_RETURN_IF_ERROR(linear_backward(blas_, d.dln, dw(LlamaTensor::kGate), nullptr,
                                                d.dgu, a.ln2, w(LlamaTensor::kGate), B, T, C, 2 * I,
                                                stream_));
    TROUPE_CUDA_RETURN_IF_ERROR(finished(LlamaTensor::kGate));
    TROUPE_CUDA_RETURN_IF_ERROR(rmsnorm_backward(d.dresidual, dw(LlamaTensor::kPostNorm), d.dln,
                                                 a.residual2, w(LlamaTensor::kPostNorm), a.ln2_rstd,
                                                 B, T, C, stream_));
    TROUPE_CUDA_RETURN_IF_ERROR(finished(LlamaTensor::kPostNorm));
    TROUPE_CUDA_RETURN_IF_ERROR(zero(d.datty, BT * Q));
    TROUPE_CUDA_RETURN_IF_ERROR(linear_backward(blas_, d.datty, dw(LlamaTensor::kO), nullptr,
                                                d.dresidual, a.atty, w(LlamaTensor::kO), B, T, Q, C,
                                                stream_));
    TROUPE_CUDA_RETURN_IF_ERROR(finished(LlamaTensor::kO));
    TROUPE_CUDA_RETURN_IF_ERROR(zero(d.dqkvr, BT * 3 * Q));
    TROUPE_CUDA_RETURN_IF_ERROR(
        attention_backward(blas_, d.dqkvr, d.datt, d.datty, a.qkvr, a.att, B, T, Q, NH, stream_));
    TROUPE_CUDA_RETURN_IF_ERROR(
        rope_qkv_backward(d.dqkv, d.dqkvr, rope_cos(), rope_sin(), B, T, NH, KV, hd, stream_));
    TROUPE_CUDA_RETURN_IF_ERROR(zero(d.dln, BTC));
    TROUPE_CUDA_RETURN_IF_ERROR(linear_backward(blas_, d.dln, dw(LlamaTensor::kQ), nullptr, d.dqkv,
                                                a.ln1, w(LlamaTensor::kQ), B, T, C, QKV, stream_));
    TROUPE_CUDA_RETURN_IF_ERROR(finished(LlamaTensor::kQ));
    TROUPE_CUDA_RETURN_IF_ERROR(rmsnorm_backward(d.dresidual, dw(LlamaTensor::kInputNorm), d.dln,
                                                 residual(l), w(LlamaTensor::kInputNorm),
                                                 a.ln1_rstd, B, T, C, stream_));
    return finished(LlamaTensor::kInputNorm);
  }

  LlamaConfig config_;
  ModelConfig model_config_;
  ModelOptions options_;
  ModelStorage storage_;
  LlamaLayout layout_;
  FloatBuffer params_;
  FloatBuffer grads_;
  Tensors param_tensors_;
  Tensors grad_tensors_;
  FloatBuffer tables_;          // the rotary cos then sin, [maxT, hd/2] each
  FloatBuffer zero_positions_;  // [maxT, C] zeros: the encoder kernel's position table
  FloatBuffer position_grads_;  // its gradient: scratch
};

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> create_llama(int device, const LlamaConfig& config,
                                                    const ModelOptions& options,
                                                    const ModelStorage& storage,
                                                    const TensorSlice& slice) {
  return CudaLlama::create(device, config, options, storage, slice);
}

}  // namespace troupe::nn::cuda
