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
    if (slice.size > 1) {
      return absl::FailedPreconditionError(
          "GPT on cuda: tensor parallelism (a slice of more than one rank) is not built for CUDA "
          "yet");
    }
    if (options.recompute_activations) {
      return absl::FailedPreconditionError(
          "GPT on cuda: recomputed activations (model.recompute_activations) are not built for "
          "CUDA yet");
    }
    absl::StatusOr<cudaStream_t> stream = device_stream(device);
    if (!stream.ok()) return stream.status();
    absl::StatusOr<Cublas> blas = Cublas::create(gemm_inputs(options.matmul));
    if (!blas.ok()) return blas.status();
    std::unique_ptr<CudaGPT> gpt(
        new CudaGPT(device, *stream, *std::move(blas), config, options, storage, slice));
    const size_t n = gpt->layout_.num_params();
    const auto L = static_cast<size_t>(config.num_layers);
    gpt->param_tensors_.blocks.assign(L, GPTBlockTensors{});
    gpt->grad_tensors_.blocks.assign(L, GPTBlockTensors{});
    if (storage.parameters) {
      TROUPE_CUDA_RETURN_IF_ERROR(
          gpt->params_.reset(MemoryCategory::kParameters, n, /*zero=*/true, storage.device));
      gpt->param_tensors_ = point_gpt_tensors(gpt->layout_, gpt->params_.data());
    }
    if (storage.gradients) {
      TROUPE_CUDA_RETURN_IF_ERROR(
          gpt->grads_.reset(MemoryCategory::kGradients, n, /*zero=*/true, storage.device));
      gpt->grad_tensors_ = point_gpt_tensors(gpt->layout_, gpt->grads_.data());
    }
    return std::unique_ptr<Model>(std::move(gpt));
  }

  const ModelConfig& config() const override { return model_config_; }
  const ModelOptions& options() const override { return options_; }
  const ModelLayout& layout() const override { return layout_.model(); }

  void init_parameters(uint64_t seed) override {
    // Made on the host, as the CPU model makes them, then copied over.
    std::vector<float> host(num_params());
    GPT::init_parameters(config_, seed, 0, host.size(), host.data());
    if (params_.data() != nullptr) {
      (void)copy_bytes(params_.data(), storage_.device, host.data(), Device::cpu(),
                       static_cast<int64_t>(host.size() * sizeof(float)));
    }
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
    TROUPE_CUDA_RETURN_IF_ERROR(forward_blocks(0, config_.num_layers));
    return head_forward(targets);
  }

  absl::Status backward(float dloss) override {
    TROUPE_CUDA_RETURN_IF_ERROR(head_backward(dloss));
    TROUPE_CUDA_RETURN_IF_ERROR(backward_blocks(0, config_.num_layers, nullptr));
    return embed_backward();
  }

  void zero_grad() override {
    if (grads_.data() != nullptr) (void)zero(grads_.data(), grads_.size());
  }

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

  const float* logits() const override { return store_.acts().logits; }

  absl::Status prepare(int B, int T) override {
    if (B < 1 || T < 1 || T > config_.max_seq_len) {
      return absl::InvalidArgumentError(
          absl::StrCat(kName, ": batch B = ", B, ", T = ", T,
                       " needs B >= 1 and 1 <= T <= max_seq_len = ", config_.max_seq_len));
    }
    const int64_t BT = int64_t{B} * T;
    const int64_t widest = std::max<int64_t>(4 * config_.channels, config_.padded_vocab());
    if (BT * widest > INT_MAX || BT * config_.num_heads * T > INT_MAX) {
      return absl::InvalidArgumentError(absl::StrCat(kName, ": batch B = ", B, ", T = ", T,
                                                     " makes an activation over INT_MAX elements"));
    }
    return prepare_store(
        B, T, [&](float* base, Activations* a) { return carve_activations(B, T, base, a); },
        [&](float* base, ActivationGradients* d) {
          return carve_activation_gradients(B, T, base, d);
        });
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
    return encoder_forward(store_.acts().encoded, device_inputs(), param_tensors_.wte,
                           param_tensors_.wpe, store_.B(), store_.T(), config_.channels, stream_);
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
    const int B = store_.B(), T = store_.T(), C = config_.channels;
    if (targets != nullptr) {
      TROUPE_CUDA_RETURN_IF_ERROR(
          check_tokens(kName, targets, store_.BT(), config_.vocab_size, "targets"));
    }
    const Activations& a = store_.acts();
    TROUPE_CUDA_RETURN_IF_ERROR(layernorm_forward(a.lnf, a.lnf_mean, a.lnf_rstd,
                                                  residual(config_.num_layers), param_tensors_.lnfw,
                                                  param_tensors_.lnfb, B, T, C, stream_));
    TROUPE_CUDA_RETURN_IF_ERROR(linear_forward(blas_, a.logits, a.lnf, param_tensors_.wte, nullptr,
                                               B, T, C, config_.padded_vocab(), stream_));
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
    const int B = store_.B(), T = store_.T(), C = config_.channels;
    const int V = config_.vocab_size, Vp = config_.padded_vocab();
    const size_t BT = store_.BT(), BTC = BT * C;
    const Activations& a = store_.acts();
    const ActivationGradients& d = store_.grads();
    TROUPE_CUDA_RETURN_IF_ERROR(zero(d.dlogits, BT * Vp));
    TROUPE_CUDA_RETURN_IF_ERROR(crossentropy_backward(d.dlogits, dloss, a.logits, a.lse,
                                                      device_targets(), B, T, V, Vp, stream_));
    TROUPE_CUDA_RETURN_IF_ERROR(zero(d.dln, BTC));
    TROUPE_CUDA_RETURN_IF_ERROR(linear_backward(blas_, d.dln, grad_tensors_.wte, nullptr, d.dlogits,
                                                a.lnf, param_tensors_.wte, B, T, C, Vp, stream_));
    TROUPE_CUDA_RETURN_IF_ERROR(zero(d.dresidual, BTC));
    return layernorm_backward(d.dresidual, grad_tensors_.lnfw, grad_tensors_.lnfb, d.dln,
                              residual(config_.num_layers), param_tensors_.lnfw, a.lnf_mean,
                              a.lnf_rstd, B, T, C, stream_);
  }

  absl::Status backward_blocks(int begin, int end, const GradientsFinal& on_final) override {
    TROUPE_CUDA_RETURN_IF_ERROR(store_.check_blocks(begin, end, "backward_blocks"));
    for (int l = end - 1; l >= begin; --l)
      TROUPE_CUDA_RETURN_IF_ERROR(block_backward(l, on_final));
    return absl::OkStatus();
  }

  absl::Status embed_backward() override {
    TROUPE_CUDA_RETURN_IF_ERROR(store_.check_inputs("embed_backward"));
    return encoder_backward(grad_tensors_.wte, grad_tensors_.wpe, store_.grads().dresidual,
                            device_inputs(), store_.B(), store_.T(), config_.channels, stream_);
  }

  float* residual(int l) override {
    const size_t BTC = store_.BT() * config_.channels;
    const int begin = store_.part_begin();
    return l == begin ? store_.acts().encoded : store_.acts().residual3 + (l - 1 - begin) * BTC;
  }
  float* dresidual() override { return store_.grads().dresidual; }

  ModelMemory memory() const override { return memory_of(params_.bytes(), grads_.bytes()); }

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
      : CudaModel(kName, config.num_layers, Device::cuda(device), stream, std::move(blas)),
        config_(config),
        model_config_(config),
        options_(options),
        storage_(storage),
        layout_(config, slice) {
    storage_.device = Device::cuda(device);
  }

  // Per slot, every block of the part keeps all it computed (attention's whole probabilities:
  // [B, NH, T, T] a block), the head its logits and loss.
  size_t carve_activations(int B, int T, float* base, Activations* acts) const {
    const size_t C = config_.channels, NH = config_.num_heads;
    const auto L = static_cast<size_t>(store_.part_end() - store_.part_begin());
    const size_t BT = static_cast<size_t>(B) * T, BTC = BT * C;
    const size_t HBT = store_.part_head() ? BT : 0;
    const size_t Vp = store_.part_head() ? static_cast<size_t>(config_.padded_vocab()) : 0;
    const size_t att = BT * NH * static_cast<size_t>(T);
    AlignedCarver c(base);
    Activations a;
    a.encoded = c.take(BTC);
    a.ln1 = c.take(L * BTC);
    a.ln1_mean = c.take(L * BT);
    a.ln1_rstd = c.take(L * BT);
    a.qkv = c.take(L * 3 * BTC);
    a.atty = c.take(L * BTC);
    a.att = c.take(L * att);
    a.residual2 = c.take(L * BTC);
    a.ln2 = c.take(L * BTC);
    a.ln2_mean = c.take(L * BT);
    a.ln2_rstd = c.take(L * BT);
    a.fch = c.take(L * 4 * BTC);
    a.fch_gelu = c.take(L * 4 * BTC);
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
    const size_t BT = static_cast<size_t>(B) * T, BTC = BT * config_.channels;
    AlignedCarver c(base);
    ActivationGradients d;
    d.dresidual = c.take(BTC);
    d.dln = c.take(BTC);
    d.datty = c.take(BTC);
    d.dqkv = c.take(3 * BTC);
    d.dfch = c.take(4 * BTC);
    d.dfch_gelu = c.take(4 * BTC);
    d.dlogits = c.take(store_.part_head() ? BT * config_.padded_vocab() : 0);
    d.datt = c.take(BT * config_.num_heads * static_cast<size_t>(T));
    if (dacts != nullptr) *dacts = d;
    return c.used();
  }

  BlockActivations block_activations(int block) const {
    const size_t BT = store_.BT(), BTC = BT * config_.channels;
    const size_t att = BT * config_.num_heads * static_cast<size_t>(store_.T());
    const auto l = static_cast<size_t>(block - store_.part_begin());
    const Activations& a = store_.acts();
    return {a.ln1 + l * BTC,       a.ln1_mean + l * BT, a.ln1_rstd + l * BT,
            a.qkv + l * 3 * BTC,   a.atty + l * BTC,    a.att + l * att,
            a.residual2 + l * BTC, a.ln2 + l * BTC,     a.ln2_mean + l * BT,
            a.ln2_rstd + l * BT,   a.fch + l * 4 * BTC, a.fch_gelu + l * 4 * BTC,
            a.residual3 + l * BTC};
  }

  absl::Status block_forward(int l) {
    const int B = store_.B(), T = store_.T(), C = config_.channels, NH = config_.num_heads;
    const size_t BTC = store_.BT() * C;
    const GPTBlockTensors& w = param_tensors_.blocks[static_cast<size_t>(l)];
    const BlockActivations a = block_activations(l);
    const float* inp = residual(l);
    TROUPE_CUDA_RETURN_IF_ERROR(
        layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, inp, w.ln1w, w.ln1b, B, T, C, stream_));
    TROUPE_CUDA_RETURN_IF_ERROR(
        linear_forward(blas_, a.qkv, a.ln1, w.qkvw, w.qkvb, B, T, C, 3 * C, stream_));
    TROUPE_CUDA_RETURN_IF_ERROR(
        attention_forward(blas_, a.atty, a.att, a.qkv, B, T, C, NH, stream_));
    // The projections are written straight into the residual sums, as on the CPU.
    TROUPE_CUDA_RETURN_IF_ERROR(
        linear_forward(blas_, a.residual2, a.atty, w.attprojw, w.attprojb, B, T, C, C, stream_));
    TROUPE_CUDA_RETURN_IF_ERROR(residual_forward(a.residual2, inp, a.residual2, BTC, stream_));
    TROUPE_CUDA_RETURN_IF_ERROR(layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.residual2,
                                                  w.ln2w, w.ln2b, B, T, C, stream_));
    TROUPE_CUDA_RETURN_IF_ERROR(
        linear_forward(blas_, a.fch, a.ln2, w.fcw, w.fcb, B, T, C, 4 * C, stream_));
    TROUPE_CUDA_RETURN_IF_ERROR(gelu_forward(a.fch_gelu, a.fch, 4 * BTC, stream_));
    TROUPE_CUDA_RETURN_IF_ERROR(linear_forward(blas_, a.residual3, a.fch_gelu, w.fcprojw, w.fcprojb,
                                               B, T, 4 * C, C, stream_));
    return residual_forward(a.residual3, a.residual2, a.residual3, BTC, stream_);
  }

  absl::Status block_backward(int l, const GradientsFinal& on_final) {
    const int B = store_.B(), T = store_.T(), C = config_.channels, NH = config_.num_heads;
    const size_t BTC = store_.BT() * C;
    const GPTBlockTensors& w = param_tensors_.blocks[static_cast<size_t>(l)];
    const GPTBlockTensors& dw = grad_tensors_.blocks[static_cast<size_t>(l)];
    const BlockActivations a = block_activations(l);
    const ActivationGradients& d = store_.grads();
    auto finished = [&](BlockTensor first_tensor) {
      return report_final(on_final, layout_.block_tensor(l, first_tensor));
    };
    // d.dresidual holds d residual3 (= d fcproj), and becomes d residual(l) as in the CPU model.
    TROUPE_CUDA_RETURN_IF_ERROR(zero(d.dfch_gelu, 4 * BTC));
    TROUPE_CUDA_RETURN_IF_ERROR(linear_backward(blas_, d.dfch_gelu, dw.fcprojw, dw.fcprojb,
                                                d.dresidual, a.fch_gelu, w.fcprojw, B, T, 4 * C, C,
                                                stream_));
    TROUPE_CUDA_RETURN_IF_ERROR(finished(BlockTensor::kFcprojw));
    TROUPE_CUDA_RETURN_IF_ERROR(zero(d.dfch, 4 * BTC));
    TROUPE_CUDA_RETURN_IF_ERROR(gelu_backward(d.dfch, d.dfch_gelu, a.fch, 4 * BTC, stream_));
    TROUPE_CUDA_RETURN_IF_ERROR(zero(d.dln, BTC));
    TROUPE_CUDA_RETURN_IF_ERROR(linear_backward(blas_, d.dln, dw.fcw, dw.fcb, d.dfch, a.ln2, w.fcw,
                                                B, T, C, 4 * C, stream_));
    TROUPE_CUDA_RETURN_IF_ERROR(finished(BlockTensor::kFcw));
    TROUPE_CUDA_RETURN_IF_ERROR(layernorm_backward(d.dresidual, dw.ln2w, dw.ln2b, d.dln,
                                                   a.residual2, w.ln2w, a.ln2_mean, a.ln2_rstd, B,
                                                   T, C, stream_));
    TROUPE_CUDA_RETURN_IF_ERROR(finished(BlockTensor::kLn2w));
    TROUPE_CUDA_RETURN_IF_ERROR(zero(d.datty, BTC));
    TROUPE_CUDA_RETURN_IF_ERROR(linear_backward(blas_, d.datty, dw.attprojw, dw.attprojb,
                                                d.dresidual, a.atty, w.attprojw, B, T, C, C,
                                                stream_));
    TROUPE_CUDA_RETURN_IF_ERROR(finished(BlockTensor::kAttprojw));
    TROUPE_CUDA_RETURN_IF_ERROR(zero(d.dqkv, 3 * BTC));
    TROUPE_CUDA_RETURN_IF_ERROR(
        attention_backward(blas_, d.dqkv, d.datt, d.datty, a.qkv, a.att, B, T, C, NH, stream_));
    TROUPE_CUDA_RETURN_IF_ERROR(zero(d.dln, BTC));
    TROUPE_CUDA_RETURN_IF_ERROR(linear_backward(blas_, d.dln, dw.qkvw, dw.qkvb, d.dqkv, a.ln1,
                                                w.qkvw, B, T, C, 3 * C, stream_));
    TROUPE_CUDA_RETURN_IF_ERROR(finished(BlockTensor::kQkvw));
    TROUPE_CUDA_RETURN_IF_ERROR(layernorm_backward(d.dresidual, dw.ln1w, dw.ln1b, d.dln,
                                                   residual(l), w.ln1w, a.ln1_mean, a.ln1_rstd, B,
                                                   T, C, stream_));
    return finished(BlockTensor::kLn1w);
  }

  GPTConfig config_;
  ModelConfig model_config_;
  ModelOptions options_;
  ModelStorage storage_;
  GPTParamLayout layout_;
  FloatBuffer params_;
  FloatBuffer grads_;
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
