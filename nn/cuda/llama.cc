// nn/cuda/llama.h: nn/llama's passes (nn/llama/passes.cc) on the device, layer for layer. The
// embedding copies rows of the table (a tensor-parallel rank's rows, summed over the group); the
// attention is GPT's over rope_qkv_forward's packing, every query head beside its own copy of its
// group's key and value, as on the CPU. Backward scratch is zeroed before layers that accumulate
// into it.
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
    absl::StatusOr<std::pair<cudaStream_t, Cublas>> opened = open_device(device, options);
    if (!opened.ok()) return opened.status();
    std::unique_ptr<CudaLlama> m(new CudaLlama(device, opened->first, std::move(opened->second),
                                               config, options, storage, slice));
    const size_t n = m->num_params();
    TROUPE_CUDA_RETURN_IF_ERROR(m->allocate_buffers());
    if (m->params_.data() != nullptr) {
      point_llama_tensors(m->layout(), 0, n, m->params_.data(), &m->param_tensors_);
    }
    if (m->grads_.data() != nullptr) {
      point_llama_tensors(m->layout(), 0, n, m->grads_.data(), &m->grad_tensors_);
    }
    // The rotary angles, on the device.
    const int hd = config.head_dim(), maxT = config.max_position_embeddings;
    std::vector<float> cos(static_cast<size_t>(maxT) * (hd / 2)), sin(cos.size());
    rope_table(cos.data(), sin.data(), maxT, hd, config.rope_theta);
    const Device on = m->device();
    TROUPE_CUDA_RETURN_IF_ERROR(
        m->tables_.reset(MemoryCategory::kOther, 2 * cos.size(), false, on));
    const auto bytes = static_cast<int64_t>(cos.size() * sizeof(float));
    TROUPE_CUDA_RETURN_IF_ERROR(
        copy_bytes(m->tables_.data(), on, cos.data(), Device::cpu(), bytes));
    TROUPE_CUDA_RETURN_IF_ERROR(
        copy_bytes(m->tables_.data() + cos.size(), on, sin.data(), Device::cpu(), bytes));
    return std::unique_ptr<Model>(std::move(m));
  }

  const ModelLayout& layout() const override { return layout_.model(); }

  absl::Status bind_parameters(size_t begin, size_t end, float* base) override {
    return bind(param_tensors_, begin, end, base, storage_.parameters, "parameters");
  }
  absl::Status bind_gradients(size_t begin, size_t end, float* base) override {
    return bind(grad_tensors_, begin, end, base, storage_.gradients, "gradients");
  }

  absl::Status prepare(int B, int T) override {
    const int64_t widest =
        std::max<int64_t>({2 * int64_t{arch_.intermediate_size}, arch_.padded_vocab(),
                           3 * int64_t{arch_.num_attention_heads} * arch_.head_dim()});
    TROUPE_CUDA_RETURN_IF_ERROR(check_shape(B, T, widest, arch_.num_attention_heads));
    return prepare_store(
        B, T, [&](float* base, LlamaActivations* a) { return carve_activations(B, T, base, a); },
        [&](float* base, LlamaActivationGradients* d) { return carve_gradients(B, T, base, d); });
  }

  absl::Status embed_backward() override {
    TROUPE_CUDA_RETURN_IF_ERROR(store_.check_inputs("embed_backward"));
    TROUPE_CUDA_RETURN_IF_ERROR(make_current());
    // One rank's rows [vocab_begin, + local_vocab); the whole vocabulary for one rank.
    return embedding_rows_backward(grad_tensors_.embed_tokens(), store_.grads().dresidual,
                                   device_inputs(), vocab_begin(), vocab_begin() + local_vocab(),
                                   store_.B(), store_.T(), arch_.hidden_size, stream_);
  }

 private:
  static constexpr const char* kName = "Llama on cuda";
  struct BlockActivations {
    float *ln1, *ln1_rstd, *qkv, *qkvr, *atty, *att, *residual2, *ln2, *ln2_rstd, *gu, *mlp,
        *residual3;
  };

  CudaLlama(int device, cudaStream_t stream, Cublas blas, const LlamaConfig& config,
            const ModelOptions& options, const ModelStorage& storage, const TensorSlice& slice)
      : CudaModel(kName, config, options, storage, slice, device, stream, std::move(blas)),
        arch_(config),
        layout_(config, slice),
        local_heads_(config.num_attention_heads / slice.size),
        local_kv_heads_(config.kv_heads() / slice.size),
        local_mlp_(config.intermediate_size / slice.size) {
    const size_t tensors = layout_.model().tensors().size();
    param_tensors_ = {std::vector<float*>(tensors, nullptr), config.tie_word_embeddings};
    grad_tensors_ = param_tensors_;
  }

  float eps() const { return static_cast<float>(arch_.rms_norm_eps); }
  const float* rope_cos() const { return tables_.data(); }
  const float* rope_sin() const { return tables_.data() + tables_.size() / 2; }

  absl::Status bind(LlamaTensors& tensors, size_t begin, size_t end, float* base, bool owned,
                    const char* what) {
    if (owned) {
      return absl::FailedPreconditionError(
          absl::StrCat(kName, "::bind_", what, ": the model owns its ", what));
    }
    if (absl::Status s = layout().check_range(begin, end); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(kName, "::bind_", what, ": ", s.message()));
    }
    point_llama_tensors(layout(), begin, end, base, &tensors);
    return absl::OkStatus();
  }

  absl::Status embed() override { return embed_rows(param_tensors_.embed_tokens(), nullptr); }

  absl::Status head_logits() override {
    const int B = store_.B(), T = store_.T(), C = arch_.hidden_size;
    const LlamaActivations& a = store_.acts();
    TROUPE_CUDA_RETURN_IF_ERROR(rmsnorm_forward(a.lnf, a.lnf_rstd,
                                                residual(arch_.num_hidden_layers),
                                                param_tensors_.norm(), B, T, C, eps(), stream_));
    // The head is column-parallel over the vocabulary: this rank's logits are its rows'.
    return linear_forward(blas_, a.logits, a.lnf, param_tensors_.lm_head(), nullptr, B, T, C,
                          local_vocab(), stream_);
  }

  absl::Status head_product_backward() override {
    const LlamaActivations& a = store_.acts();
    const LlamaActivationGradients& d = store_.grads();
    // A tied head's weight gradient accumulates into the embedding's.
    return linear_backward(blas_, d.dln, grad_tensors_.lm_head(), nullptr, d.dlogits, a.lnf,
                           param_tensors_.lm_head(), store_.B(), store_.T(), arch_.hidden_size,
                           local_vocab(), stream_);
  }

  absl::Status head_norm_backward() override {
    const int B = store_.B(), T = store_.T(), C = arch_.hidden_size;
    const LlamaActivations& a = store_.acts();
    const LlamaActivationGradients& d = store_.grads();
    return rmsnorm_backward(d.dresidual, grad_tensors_.norm(), d.dln,
                            residual(arch_.num_hidden_layers), param_tensors_.norm(), a.lnf_rstd, B,
                            T, C, stream_);
  }

  // Per slot, every block of the part keeps all it computed (attention's whole probabilities:
  // [B, NH, T, T] a block), the head its logits and loss.
  size_t carve_activations(int B, int T, float* base, LlamaActivations* acts) const {
    const size_t C = arch_.hidden_size, hd = arch_.head_dim();
    const size_t NH = local_heads_, KV = local_kv_heads_;
    const size_t Q = NH * hd, QKV = (NH + 2 * KV) * hd, I = local_mlp_;
    const auto L = static_cast<size_t>(store_.part_end() - store_.part_begin());
    const size_t BT = static_cast<size_t>(B) * T, BTC = BT * C;
    const size_t HBT = store_.part_head() ? BT : 0;
    const size_t Vp = store_.part_head() ? static_cast<size_t>(local_vocab()) : 0;
    // Recomputed in backward into one block's buffers (ModelOptions::recompute_activations).
    const size_t Lr = options_.recompute_activations ? 1 : L;
    AlignedCarver c(base);
    LlamaActivations a;
    a.encoded = c.take(BTC);
    a.ln1 = c.take(Lr * BTC);
    a.ln1_rstd = c.take(L * BT);
    a.qkv = c.take(L * BT * QKV);
    a.qkvr = c.take(Lr * BT * 3 * Q);
    a.atty = c.take(Lr * BT * Q);
    a.att = c.take(Lr * BT * NH * static_cast<size_t>(T));
    a.residual2 = c.take(L * BTC);
    a.ln2 = c.take(Lr * BTC);
    a.ln2_rstd = c.take(L * BT);
    a.gu = c.take(L * BT * 2 * I);
    a.mlp = c.take(Lr * BT * I);
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
    const size_t C = arch_.hidden_size, hd = arch_.head_dim();
    const size_t NH = local_heads_, KV = local_kv_heads_;
    const size_t Q = NH * hd, QKV = (NH + 2 * KV) * hd, I = local_mlp_;
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
    d.dlogits = c.take(store_.part_head() ? BT * local_vocab() : 0);
    d.datt = c.take(BT * NH * static_cast<size_t>(T));
    if (dacts != nullptr) *dacts = d;
    return c.used();
  }

  BlockActivations block_activations(int block) const {
    const size_t C = arch_.hidden_size, hd = arch_.head_dim();
    const size_t NH = local_heads_, KV = local_kv_heads_;
    const size_t Q = NH * hd, QKV = (NH + 2 * KV) * hd, I = local_mlp_;
    const size_t BT = store_.BT(), BTC = BT * C;
    const auto l = static_cast<size_t>(block - store_.part_begin());
    const size_t lr = options_.recompute_activations ? 0 : l;  // recomputed: the one shared block
    const LlamaActivations& a = store_.acts();
    return {a.ln1 + lr * BTC,      a.ln1_rstd + l * BT,
            a.qkv + l * BT * QKV,  a.qkvr + lr * BT * 3 * Q,
            a.atty + lr * BT * Q,  a.att + lr * BT * NH * static_cast<size_t>(store_.T()),
            a.residual2 + l * BTC, a.ln2 + lr * BTC,
            a.ln2_rstd + l * BT,   a.gu + l * BT * 2 * I,
            a.mlp + lr * BT * I,   a.residual3 + l * BTC};
  }

  absl::Status block_forward(int l) override {
    const int B = store_.B(), T = store_.T(), C = arch_.hidden_size, hd = arch_.head_dim();
    const int NH = local_heads_, KV = local_kv_heads_;  // this rank's
    const int I = local_mlp_, Q = NH * hd, QKV = (NH + 2 * KV) * hd;
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
    // o and down are row-parallel under tensor parallelism (project_rows), as on the CPU.
    TROUPE_CUDA_RETURN_IF_ERROR(project_rows(a.residual2, a.atty, w(LlamaTensor::kO), nullptr, Q));
    TROUPE_CUDA_RETURN_IF_ERROR(residual_forward(a.residual2, inp, a.residual2, BTC, stream_));
    TROUPE_CUDA_RETURN_IF_ERROR(rmsnorm_forward(
        a.ln2, a.ln2_rstd, a.residual2, w(LlamaTensor::kPostNorm), B, T, C, eps(), stream_));
    TROUPE_CUDA_RETURN_IF_ERROR(linear_forward(blas_, a.gu, a.ln2, w(LlamaTensor::kGate), nullptr,
                                               B, T, C, 2 * I, stream_));
    TROUPE_CUDA_RETURN_IF_ERROR(swiglu_forward(a.mlp, a.gu, B, T, I, stream_));
    TROUPE_CUDA_RETURN_IF_ERROR(
        project_rows(a.residual3, a.mlp, w(LlamaTensor::kDown), nullptr, I));
    return residual_forward(a.residual3, a.residual2, a.residual3, BTC, stream_);
  }

  // What block_forward computed that the backward of block l reads and recompute_activations
  // did not keep: the same kernels on the same inputs, so the same bits.
  absl::Status block_recompute(int l) {
    const int B = store_.B(), T = store_.T(), C = arch_.hidden_size, hd = arch_.head_dim();
    const int NH = local_heads_, KV = local_kv_heads_, I = local_mlp_;
    const BlockActivations a = block_activations(l);
    auto w = [&](LlamaTensor t) { return param_tensors_.block(l, t); };
    TROUPE_CUDA_RETURN_IF_ERROR(rmsnorm_forward(
        a.ln1, a.ln1_rstd, residual(l), w(LlamaTensor::kInputNorm), B, T, C, eps(), stream_));
    TROUPE_CUDA_RETURN_IF_ERROR(
        rope_qkv_forward(a.qkvr, a.qkv, rope_cos(), rope_sin(), B, T, NH, KV, hd, stream_));
    TROUPE_CUDA_RETURN_IF_ERROR(
        attention_forward(blas_, a.atty, a.att, a.qkvr, B, T, NH * hd, NH, stream_));
    TROUPE_CUDA_RETURN_IF_ERROR(rmsnorm_forward(
        a.ln2, a.ln2_rstd, a.residual2, w(LlamaTensor::kPostNorm), B, T, C, eps(), stream_));
    return swiglu_forward(a.mlp, a.gu, B, T, I, stream_);
  }

  absl::Status block_backward(int l, const GradientsFinal& on_final) override {
    if (options_.recompute_activations) TROUPE_CUDA_RETURN_IF_ERROR(block_recompute(l));
    const int B = store_.B(), T = store_.T(), C = arch_.hidden_size, hd = arch_.head_dim();
    const int NH = local_heads_, KV = local_kv_heads_;  // this rank's
    const int I = local_mlp_, Q = NH * hd, QKV = (NH + 2 * KV) * hd;
    const size_t BT = store_.BT(), BTC = BT * C;
    const BlockActivations a = block_activations(l);
    const LlamaActivationGradients& d = store_.grads();
    auto w = [&](LlamaTensor t) { return param_tensors_.block(l, t); };
    auto dw = [&](LlamaTensor t) { return grad_tensors_.block(l, t); };
    auto finished = [&](LlamaTensor first_tensor) {
      return report_final(on_final, layout_.block_tensor(l, first_tensor));
    };
    // d.dresidual holds d residual3 (= d down), and becomes d residual(l) as on the CPU. With
    // tensor parallelism the row-parallel projections' backward is local; the column-parallel
    // layers' input gradients dln are partial sums, summed over the group.
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
    TROUPE_CUDA_RETURN_IF_ERROR(sum_over_slices(d.dln, BTC));
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
    TROUPE_CUDA_RETURN_IF_ERROR(sum_over_slices(d.dln, BTC));
    TROUPE_CUDA_RETURN_IF_ERROR(finished(LlamaTensor::kQ));
    TROUPE_CUDA_RETURN_IF_ERROR(rmsnorm_backward(d.dresidual, dw(LlamaTensor::kInputNorm), d.dln,
                                                 residual(l), w(LlamaTensor::kInputNorm),
                                                 a.ln1_rstd, B, T, C, stream_));
    return finished(LlamaTensor::kInputNorm);
  }

  LlamaConfig arch_;  // the architecture's config (CudaModel's config_ is the seam's)
  LlamaLayout layout_;
  LlamaTensors param_tensors_;
  LlamaTensors grad_tensors_;
  int local_heads_, local_kv_heads_, local_mlp_;  // this rank's: the whole for one rank
  FloatBuffer tables_;                            // the rotary cos then sin, [maxT, hd/2] each
};

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> create_llama(int device, const LlamaConfig& config,
                                                    const ModelOptions& options,
                                                    const ModelStorage& storage,
                                                    const TensorSlice& slice) {
  return CudaLlama::create(device, config, options, storage, slice);
}

}  // namespace troupe::nn::cuda
