// nn/cuda/gpt.h: nn/gpt2/gpt.cc's pieces on the device, layer for layer. The CUDA layers'
// backward passes accumulate (+=) where some CPU calls overwrite: each scratch gradient is zeroed
// on the stream before the layer that fills it.
#include "nn/cuda/gpt.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "nn/cuda/context.h"
#include "nn/cuda/cuda_model.h"
#include "nn/cuda/detail/check.h"
#include "nn/cuda/layers.h"
#include "nn/gpt2/gpt.h"
#include "nn/gpt2/layout.h"
#include "nn/memory.h"
#include "nn/model/activation_store.h"

namespace troupe::nn::cuda {
namespace {

struct GptActivations {
  float *encoded, *ln1, *ln1_mean, *ln1_rstd, *qkv, *atty, *att, *residual2, *ln2, *ln2_mean,
      *ln2_rstd, *fch, *fch_gelu, *residual3, *lnf, *lnf_mean, *lnf_rstd, *logits, *lse, *losses,
      *loss;
};
struct GptActivationGradients {
  float *dresidual, *dln, *datty, *dqkv, *dfch, *dfch_gelu, *dlogits, *datt;
};

class CudaGPT final : public CudaModel<GptActivations, GptActivationGradients> {
 public:
  static absl::StatusOr<std::unique_ptr<Model>> create(int device, const GPTConfig& config,
                                                       const ModelOptions& options,
                                                       const ModelStorage& storage,
                                                       const TensorSlice& slice) {
    if (absl::Status s = config.validate(); !s.ok()) return s;
    if (absl::Status s = validate_slice(config, slice); !s.ok()) return s;
    absl::StatusOr<std::pair<cudaStream_t, Cublas>> opened = open_device(device, options);
    if (!opened.ok()) return opened.status();
    std::unique_ptr<CudaGPT> gpt(new CudaGPT(device, opened->first, std::move(opened->second),
                                             config, options, storage, slice));
    const auto L = static_cast<size_t>(config.num_layers);
    gpt->param_tensors_.blocks.assign(L, GPTBlockTensors{});
    gpt->grad_tensors_.blocks.assign(L, GPTBlockTensors{});
    TROUPE_CUDA_RETURN_IF_ERROR(gpt->allocate_buffers());
    if (gpt->params_.data() != nullptr) {
      gpt->param_tensors_ = point_gpt_tensors(gpt->layout_, gpt->params_.data());
    }
    if (gpt->grads_.data() != nullptr) {
      gpt->grad_tensors_ = point_gpt_tensors(gpt->layout_, gpt->grads_.data());
    }
    return std::unique_ptr<Model>(std::move(gpt));
  }

  const ModelLayout& layout() const override { return layout_.model(); }

  absl::Status bind_parameters(size_t begin, size_t end, float* base) override {
    if (storage_.parameters) {
      return absl::FailedPreconditionError("GPT::bind_parameters: the model owns its parameters");
    }
    return rebind_gpt_tensors(layout_, begin, end, base, &param_tensors_);
  }
  absl::Status bind_gradients(size_t begin, size_t end, float* base) override {
    if (storage_.gradients) {
      return absl::FailedPreconditionError("GPT::bind_gradients: the model owns its gradients");
    }
    return rebind_gpt_tensors(layout_, begin, end, base, &grad_tensors_);
  }

  absl::Status prepare(int B, int T) override {
    TROUPE_CUDA_RETURN_IF_ERROR(check_shape(
        B, T, std::max<int64_t>(4 * arch_.channels, arch_.padded_vocab()), arch_.num_heads));
    return prepare_store(
        B, T, [&](float* base, Activations* a) { return carve_activations(B, T, base, a); },
        [&](float* base, ActivationGradients* d) {
          return carve_activation_gradients(B, T, base, d);
        });
  }

  absl::Status embed_backward() override {
    TROUPE_CUDA_RETURN_IF_ERROR(store_.check_inputs("embed_backward"));
    TROUPE_CUDA_RETURN_IF_ERROR(make_current());
    const int B = store_.B(), T = store_.T(), C = arch_.channels;
    const float* dout = store_.grads().dresidual;
    if (!sliced()) {
      return encoder_backward(grad_tensors_.wte, grad_tensors_.wpe, dout, device_inputs(), B, T, C,
                              stream_);
    }
    // This rank's rows of wte; every rank the whole, replicated, position gradient.
    TROUPE_CUDA_RETURN_IF_ERROR(
        embedding_rows_backward(grad_tensors_.wte, dout, device_inputs(), vocab_begin(),
                                vocab_begin() + local_vocab(), B, T, C, stream_));
    return position_backward(grad_tensors_.wpe, dout, B, T, C, stream_);
  }

 private:
  static constexpr const char* kName = "GPT on cuda";
  using Activations = GptActivations;
  using ActivationGradients = GptActivationGradients;
  struct BlockActivations {
    float *ln1, *ln1_mean, *ln1_rstd, *qkv, *atty, *att, *residual2, *ln2, *ln2_mean, *ln2_rstd,
        *fch, *fch_gelu, *residual3;
  };

  CudaGPT(int device, cudaStream_t stream, Cublas blas, const GPTConfig& config,
          const ModelOptions& options, const ModelStorage& storage, const TensorSlice& slice)
      : CudaModel(kName, config, options, storage, slice, device, stream, std::move(blas)),
        arch_(config),
        layout_(config, slice),
        local_channels_(config.channels / slice.size),
        local_heads_(config.num_heads / slice.size) {}

  absl::Status embed() override {
    if (sliced()) return embed_rows(param_tensors_.wte, param_tensors_.wpe);
    return encoder_forward(store_.acts().encoded, device_inputs(), param_tensors_.wte,
                           param_tensors_.wpe, store_.B(), store_.T(), arch_.channels, stream_);
  }

  absl::Status head_logits() override {
    const int B = store_.B(), T = store_.T(), C = arch_.channels;
    const Activations& a = store_.acts();
    TROUPE_CUDA_RETURN_IF_ERROR(layernorm_forward(a.lnf, a.lnf_mean, a.lnf_rstd,
                                                  residual(arch_.num_layers), param_tensors_.lnfw,
                                                  param_tensors_.lnfb, B, T, C, stream_));
    // The head is column-parallel over the vocabulary: this rank's logits are its rows of wte's.
    return linear_forward(blas_, a.logits, a.lnf, param_tensors_.wte, nullptr, B, T, C,
                          local_vocab(), stream_);
  }

  absl::Status head_product_backward() override {
    const Activations& a = store_.acts();
    const ActivationGradients& d = store_.grads();
    return linear_backward(blas_, d.dln, grad_tensors_.wte, nullptr, d.dlogits, a.lnf,
                           param_tensors_.wte, store_.B(), store_.T(), arch_.channels,
                           local_vocab(), stream_);
  }

  absl::Status head_norm_backward() override {
    const int B = store_.B(), T = store_.T(), C = arch_.channels;
    const Activations& a = store_.acts();
    const ActivationGradients& d = store_.grads();
    return layernorm_backward(d.dresidual, grad_tensors_.lnfw, grad_tensors_.lnfb, d.dln,
                              residual(arch_.num_layers), param_tensors_.lnfw, a.lnf_mean,
                              a.lnf_rstd, B, T, C, stream_);
  }

  // Per slot, every block of the part keeps all it computed (attention's whole probabilities:
  // [B, NH, T, T] a block), the head its logits and loss. Under tensor parallelism the
  // attention's and the MLP's activations are this rank's heads' and part's (Cl = C / tp), the
  // logits its columns of the vocabulary.
  size_t carve_activations(int B, int T, float* base, Activations* acts) const {
    const size_t C = arch_.channels, Cl = local_channels_, NH = local_heads_;
    const auto L = static_cast<size_t>(store_.part_end() - store_.part_begin());
    const size_t BT = static_cast<size_t>(B) * T, BTC = BT * C;
    const size_t HBT = store_.part_head() ? BT : 0;
    const size_t Vp = store_.part_head() ? static_cast<size_t>(local_vocab()) : 0;
    const size_t att = BT * NH * static_cast<size_t>(T);
    const size_t BTCl = BT * Cl;
    // Recomputed in backward into one block's buffers (ModelOptions::recompute_activations).
    const size_t Lr = options_.recompute_activations ? 1 : L;
    AlignedCarver c(base);
    Activations a;
    a.encoded = c.take(BTC);
    a.ln1 = c.take(Lr * BTC);
    a.ln1_mean = c.take(L * BT);
    a.ln1_rstd = c.take(L * BT);
    a.qkv = c.take(L * 3 * BTCl);
    a.atty = c.take(Lr * BTCl);
    a.att = c.take(Lr * att);
    a.residual2 = c.take(L * BTC);
    a.ln2 = c.take(Lr * BTC);
    a.ln2_mean = c.take(L * BT);
    a.ln2_rstd = c.take(L * BT);
    a.fch = c.take(L * 4 * BTCl);
    a.fch_gelu = c.take(Lr * 4 * BTCl);
    a.residual3 = c.take(L * BTC);
    a.lnf = c.take(HBT * C);
    a.lnf_mean = c.take(HBT);
    a.lnf_rstd = c.take(HBT);
    a.logits = c.take(HBT * Vp);
    a.lse = c.take(HBT);
    a.losses = c.take(HBT);
    a.loss = c.take(store_.part_head() ? 1 : 0);
    if (acts != nullptr) *acts = a;
    return c.used();
  }

  size_t carve_activation_gradients(int B, int T, float* base, ActivationGradients* dacts) const {
    const size_t BT = static_cast<size_t>(B) * T, BTC = BT * arch_.channels;
    const size_t BTCl = BT * local_channels_;
    AlignedCarver c(base);
    ActivationGradients d;
    d.dresidual = c.take(BTC);
    d.dln = c.take(BTC);
    d.datty = c.take(BTCl);
    d.dqkv = c.take(3 * BTCl);
    d.dfch = c.take(4 * BTCl);
    d.dfch_gelu = c.take(4 * BTCl);
    d.dlogits = c.take(store_.part_head() ? BT * local_vocab() : 0);
    d.datt = c.take(BT * local_heads_ * static_cast<size_t>(T));
    if (dacts != nullptr) *dacts = d;
    return c.used();
  }

  BlockActivations block_activations(int block) const {
    const size_t BT = store_.BT(), BTC = BT * arch_.channels, BTCl = BT * local_channels_;
    const size_t att = BT * local_heads_ * static_cast<size_t>(store_.T());
    const auto l = static_cast<size_t>(block - store_.part_begin());
    const size_t lr = options_.recompute_activations ? 0 : l;  // recomputed: the one shared block
    const Activations& a = store_.acts();
    return {a.ln1 + lr * BTC,      a.ln1_mean + l * BT,  a.ln1_rstd + l * BT,
            a.qkv + l * 3 * BTCl,  a.atty + lr * BTCl,   a.att + lr * att,
            a.residual2 + l * BTC, a.ln2 + lr * BTC,     a.ln2_mean + l * BT,
            a.ln2_rstd + l * BT,   a.fch + l * 4 * BTCl, a.fch_gelu + lr * 4 * BTCl,
            a.residual3 + l * BTC};
  }

  // With tensor parallelism qkv and fc are column-parallel (this rank's heads, its part of the
  // MLP), attproj and fcproj row-parallel (project_rows), as on the CPU.
  absl::Status block_forward(int l) override {
    const int B = store_.B(), T = store_.T(), C = arch_.channels;
    const int Cl = local_channels_, NH = local_heads_;  // the whole C and NH for one rank
    const size_t BTC = store_.BT() * C;
    const GPTBlockTensors& w = param_tensors_.blocks[static_cast<size_t>(l)];
    const BlockActivations a = block_activations(l);
    const float* inp = residual(l);
    TROUPE_CUDA_RETURN_IF_ERROR(
        layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, inp, w.ln1w, w.ln1b, B, T, C, stream_));
    TROUPE_CUDA_RETURN_IF_ERROR(
        linear_forward(blas_, a.qkv, a.ln1, w.qkvw, w.qkvb, B, T, C, 3 * Cl, stream_));
    TROUPE_CUDA_RETURN_IF_ERROR(
        attention_forward(blas_, a.atty, a.att, a.qkv, B, T, Cl, NH, stream_));
    // The projections are written straight into the residual sums, as on the CPU.
    TROUPE_CUDA_RETURN_IF_ERROR(project_rows(a.residual2, a.atty, w.attprojw, w.attprojb, Cl));
    TROUPE_CUDA_RETURN_IF_ERROR(residual_forward(a.residual2, inp, a.residual2, BTC, stream_));
    TROUPE_CUDA_RETURN_IF_ERROR(layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.residual2,
                                                  w.ln2w, w.ln2b, B, T, C, stream_));
    TROUPE_CUDA_RETURN_IF_ERROR(
        linear_forward(blas_, a.fch, a.ln2, w.fcw, w.fcb, B, T, C, 4 * Cl, stream_));
    TROUPE_CUDA_RETURN_IF_ERROR(gelu_forward(a.fch_gelu, a.fch, 4 * store_.BT() * Cl, stream_));
    TROUPE_CUDA_RETURN_IF_ERROR(
        project_rows(a.residual3, a.fch_gelu, w.fcprojw, w.fcprojb, 4 * Cl));
    return residual_forward(a.residual3, a.residual2, a.residual3, BTC, stream_);
  }

  // What block_forward computed that the backward of block l reads and recompute_activations
  // did not keep: the same kernels on the same inputs, so the same bits.
  absl::Status block_recompute(int l) {
    const int B = store_.B(), T = store_.T(), C = arch_.channels;
    const int Cl = local_channels_, NH = local_heads_;
    const GPTBlockTensors& w = param_tensors_.blocks[static_cast<size_t>(l)];
    const BlockActivations a = block_activations(l);
    TROUPE_CUDA_RETURN_IF_ERROR(layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, residual(l),
                                                  w.ln1w, w.ln1b, B, T, C, stream_));
    TROUPE_CUDA_RETURN_IF_ERROR(
        attention_forward(blas_, a.atty, a.att, a.qkv, B, T, Cl, NH, stream_));
    TROUPE_CUDA_RETURN_IF_ERROR(layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.residual2,
                                                  w.ln2w, w.ln2b, B, T, C, stream_));
    return gelu_forward(a.fch_gelu, a.fch, 4 * store_.BT() * Cl, stream_);
  }

  absl::Status block_backward(int l, const GradientsFinal& on_final) override {
    if (options_.recompute_activations) TROUPE_CUDA_RETURN_IF_ERROR(block_recompute(l));
    const int B = store_.B(), T = store_.T(), C = arch_.channels;
    const int Cl = local_channels_, NH = local_heads_;
    const size_t BTC = store_.BT() * C, BTCl = store_.BT() * Cl;
    const GPTBlockTensors& w = param_tensors_.blocks[static_cast<size_t>(l)];
    const GPTBlockTensors& dw = grad_tensors_.blocks[static_cast<size_t>(l)];
    const BlockActivations a = block_activations(l);
    const ActivationGradients& d = store_.grads();
    auto finished = [&](BlockTensor first_tensor) {
      return report_final(on_final, layout_.block_tensor(l, first_tensor));
    };
    // d.dresidual holds d residual3 (= d fcproj), and becomes d residual(l) as in the CPU model.
    // With tensor parallelism the row-parallel projections' backward is local (each rank computes
    // the replicated biases' whole gradient); the column-parallel layers' input gradients dln are
    // partial sums, summed over the group.
    TROUPE_CUDA_RETURN_IF_ERROR(zero(d.dfch_gelu, 4 * BTCl));
    TROUPE_CUDA_RETURN_IF_ERROR(linear_backward(blas_, d.dfch_gelu, dw.fcprojw, dw.fcprojb,
                                                d.dresidual, a.fch_gelu, w.fcprojw, B, T, 4 * Cl, C,
                                                stream_));
    TROUPE_CUDA_RETURN_IF_ERROR(finished(BlockTensor::kFcprojw));
    TROUPE_CUDA_RETURN_IF_ERROR(zero(d.dfch, 4 * BTCl));
    TROUPE_CUDA_RETURN_IF_ERROR(gelu_backward(d.dfch, d.dfch_gelu, a.fch, 4 * BTCl, stream_));
    TROUPE_CUDA_RETURN_IF_ERROR(zero(d.dln, BTC));
    TROUPE_CUDA_RETURN_IF_ERROR(linear_backward(blas_, d.dln, dw.fcw, dw.fcb, d.dfch, a.ln2, w.fcw,
                                                B, T, C, 4 * Cl, stream_));
    TROUPE_CUDA_RETURN_IF_ERROR(sum_over_slices(d.dln, BTC));
    TROUPE_CUDA_RETURN_IF_ERROR(finished(BlockTensor::kFcw));
    TROUPE_CUDA_RETURN_IF_ERROR(layernorm_backward(d.dresidual, dw.ln2w, dw.ln2b, d.dln,
                                                   a.residual2, w.ln2w, a.ln2_mean, a.ln2_rstd, B,
                                                   T, C, stream_));
    TROUPE_CUDA_RETURN_IF_ERROR(finished(BlockTensor::kLn2w));
    TROUPE_CUDA_RETURN_IF_ERROR(zero(d.datty, BTCl));
    TROUPE_CUDA_RETURN_IF_ERROR(linear_backward(blas_, d.datty, dw.attprojw, dw.attprojb,
                                                d.dresidual, a.atty, w.attprojw, B, T, Cl, C,
                                                stream_));
    TROUPE_CUDA_RETURN_IF_ERROR(finished(BlockTensor::kAttprojw));
    TROUPE_CUDA_RETURN_IF_ERROR(zero(d.dqkv, 3 * BTCl));
    TROUPE_CUDA_RETURN_IF_ERROR(
        attention_backward(blas_, d.dqkv, d.datt, d.datty, a.qkv, a.att, B, T, Cl, NH, stream_));
    TROUPE_CUDA_RETURN_IF_ERROR(zero(d.dln, BTC));
    TROUPE_CUDA_RETURN_IF_ERROR(linear_backward(blas_, d.dln, dw.qkvw, dw.qkvb, d.dqkv, a.ln1,
                                                w.qkvw, B, T, C, 3 * Cl, stream_));
    TROUPE_CUDA_RETURN_IF_ERROR(sum_over_slices(d.dln, BTC));
    TROUPE_CUDA_RETURN_IF_ERROR(finished(BlockTensor::kQkvw));
    TROUPE_CUDA_RETURN_IF_ERROR(layernorm_backward(d.dresidual, dw.ln1w, dw.ln1b, d.dln,
                                                   residual(l), w.ln1w, a.ln1_mean, a.ln1_rstd, B,
                                                   T, C, stream_));
    return finished(BlockTensor::kLn1w);
  }

  GPTConfig arch_;  // the architecture's config (CudaModel's config_ is the seam's)
  GPTParamLayout layout_;
  int local_channels_;  // C / tp: this rank's heads' channels, its part of the MLP (/ 4)
  int local_heads_;
  GPTTensors param_tensors_;
  GPTTensors grad_tensors_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> create_gpt(int device, const GPTConfig& config,
                                                  const ModelOptions& options,
                                                  const ModelStorage& storage,
                                                  const TensorSlice& slice) {
  return CudaGPT::create(device, config, options, storage, slice);
}

}  // namespace troupe::nn::cuda
