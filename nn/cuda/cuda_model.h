// What the models of libtroupe_nn_cuda share (nn/cuda/gpt.h, nn/cuda/llama.h): the device, its
// stream and cuBLAS handle, the activation store in device memory with each slot's tokens on the
// device, and the pieces of the seam that do not depend on the architecture. `Acts` and `Grads`
// are an architecture's structs of pointers into a slot's buffer and the scratch.
// Compiled only in builds with CUDA.
#pragma once

#include <cuda_runtime_api.h>

#include <climits>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "nn/cuda/context.h"
#include "nn/cuda/detail/check.h"
#include "nn/cuda/layers.h"
#include "nn/memory.h"
#include "nn/model/activation_store.h"
#include "nn/model/model.h"

namespace troupe::nn::cuda {

#define TROUPE_CUDA_RETURN_IF_ERROR(expr)     \
  do {                                        \
    if (absl::Status _s = (expr); !_s.ok()) { \
      return _s;                              \
    }                                         \
  } while (0)

// Carves a device buffer in pieces aligned to 256 bytes (64 floats), as cudaMalloc aligns.
class AlignedCarver {
 public:
  explicit AlignedCarver(float* base) : base_(base) {}
  float* take(size_t n) {
    float* p = base_ != nullptr ? base_ + used_ : nullptr;
    used_ += (n + 63) / 64 * 64;
    return p;
  }
  size_t used() const { return used_; }

 private:
  float* base_;
  size_t used_ = 0;
};

// The products' inputs ModelOptions::matmul asks for.
inline GemmInputs gemm_inputs(DType matmul) {
  switch (matmul) {
    case DType::kBFloat16:
      return GemmInputs::kBFloat16;
    case DType::kFloat16:
      return GemmInputs::kFloat16;
    case DType::kFloat32:
      break;
  }
  return GemmInputs::kFloat32;
}

// What a model on `device` computes with: the device's stream and a cuBLAS handle for
// options.matmul. FailedPrecondition, naming `model`, for what CUDA models do not run yet: tensor
// parallelism (a slice of more than one rank).
inline absl::StatusOr<std::pair<cudaStream_t, Cublas>> open_device(const char* model, int device,
                                                                   const ModelOptions& options,
                                                                   const TensorSlice& slice) {
  if (slice.size > 1) {
    return absl::FailedPreconditionError(absl::StrCat(
        model, ": tensor parallelism (a slice of more than one rank) is not built for CUDA yet"));
  }
  absl::StatusOr<cudaStream_t> stream = device_stream(device);
  if (!stream.ok()) return stream.status();
  absl::StatusOr<Cublas> blas = Cublas::create(gemm_inputs(options.matmul));
  if (!blas.ok()) return blas.status();
  return std::pair<cudaStream_t, Cublas>(*stream, *std::move(blas));
}

// The model seam's pieces that are the same for every architecture on the device: the forward
// and backward in pieces, the head's loss and its gradient, the buffers, the slots. An
// architecture gives its embedding, its blocks, its head's norm and product and their backward.
// `Acts` must have encoded, residual3, lnf, logits, lse, losses and loss; `Grads` dresidual, dln
// and dlogits.
template <typename Acts, typename Grads>
class CudaModel : public Model {
 public:
  const ModelConfig& config() const override { return config_; }
  const ModelOptions& options() const override { return options_; }
  Device device() const override { return storage_.device; }
  void set_tensor_parallel(AllReduceFn, AllReduceFn) override {}  // one rank: nothing to reduce

  // Made on the host, as the CPU models make them, then copied over.
  void init_parameters(uint64_t seed) override {
    if (params_.data() == nullptr) return;  // bound parameters are the caller's to fill
    std::vector<float> host(num_params());
    nn::init_parameters(config_, layout().slice(), seed, 0, host.size(), host.data());
    (void)copy_bytes(params_.data(), device(), host.data(), Device::cpu(),
                     static_cast<int64_t>(host.size() * sizeof(float)));
  }
  float* params() override { return params_.data(); }
  float* grads() override { return grads_.data(); }
  void zero_grad() override {
    if (grads_.data() != nullptr) (void)zero(grads_.data(), grads_.size());
  }

  absl::StatusOr<float> forward(const int32_t* inputs, const int32_t* targets, int B,
                                int T) override {
    TROUPE_CUDA_RETURN_IF_ERROR(prepare(B, T));
    const size_t BT = static_cast<size_t>(B) * T;
    TROUPE_CUDA_RETURN_IF_ERROR(check_tokens(name_, inputs, BT, config_.vocab_size(), "inputs"));
    if (targets != nullptr) {
      TROUPE_CUDA_RETURN_IF_ERROR(
          check_tokens(name_, targets, BT, config_.vocab_size(), "targets"));
    }
    TROUPE_CUDA_RETURN_IF_ERROR(embed_forward(inputs));
    TROUPE_CUDA_RETURN_IF_ERROR(forward_blocks(0, config_.num_layers()));
    return head_forward(targets);
  }
  absl::Status backward(float dloss) override {
    TROUPE_CUDA_RETURN_IF_ERROR(head_backward(dloss));
    TROUPE_CUDA_RETURN_IF_ERROR(backward_blocks(0, config_.num_layers(), nullptr));
    return embed_backward();
  }

  const float* logits() const override { return store_.acts().logits; }

  absl::Status set_part(int block_begin, int block_end, bool head) override {
    return store_.set_part(block_begin, block_end, head);
  }
  absl::Status set_activation_slots(int n) override {
    TROUPE_CUDA_RETURN_IF_ERROR(store_.set_slots(n));
    tokens_.clear();  // laid out again by the next prepare
    tokens_.resize(static_cast<size_t>(n));
    return absl::OkStatus();
  }
  int activation_slots() const override { return store_.slots(); }
  void use_slot(int j) override { store_.use_slot(j); }

  absl::Status embed_forward(const int32_t* inputs) override {
    TROUPE_CUDA_RETURN_IF_ERROR(store_.check_prepared("embed_forward"));
    if (store_.part_begin() != 0) {
      return absl::FailedPreconditionError(
          absl::StrCat(name_, "::embed_forward: its part starts at block ", store_.part_begin()));
    }
    TROUPE_CUDA_RETURN_IF_ERROR(
        check_tokens(name_, inputs, store_.BT(), config_.vocab_size(), "inputs"));
    store_.set_inputs(inputs);
    TROUPE_CUDA_RETURN_IF_ERROR(upload_tokens(device_inputs(), inputs));
    return embed();
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
          absl::StrCat(name_, "::head_forward: its part has no head (set_part)"));
    }
    if (targets != nullptr) {
      TROUPE_CUDA_RETURN_IF_ERROR(
          check_tokens(name_, targets, store_.BT(), config_.vocab_size(), "targets"));
    }
    const Acts& a = store_.acts();
    TROUPE_CUDA_RETURN_IF_ERROR(head_logits());
    if (targets == nullptr) {
      store_.clear_targets();
      return std::numeric_limits<float>::quiet_NaN();
    }
    store_.set_targets(targets);
    TROUPE_CUDA_RETURN_IF_ERROR(upload_tokens(device_targets(), targets));
    TROUPE_CUDA_RETURN_IF_ERROR(
        crossentropy_forward(a.loss, a.losses, a.lse, a.logits, device_targets(), store_.B(),
                             store_.T(), config_.vocab_size(), config_.padded_vocab(), stream_));
    float loss = 0;
    TROUPE_CUDA_RETURN_IF_ERROR(copy_bytes(&loss, Device::cpu(), a.loss, device(), sizeof(float)));
    return loss;
  }
  absl::Status head_backward(float dloss) override {
    if (!store_.have_targets()) {
      return absl::FailedPreconditionError(absl::StrCat(
          name_, "::backward: the last forward had no targets; run forward with targets first"));
    }
    const int B = store_.B(), T = store_.T(), Vp = config_.padded_vocab();
    const size_t BT = store_.BT(), BTC = BT * config_.hidden_size();
    const Acts& a = store_.acts();
    const Grads& d = store_.grads();
    TROUPE_CUDA_RETURN_IF_ERROR(zero(d.dlogits, BT * Vp));
    TROUPE_CUDA_RETURN_IF_ERROR(crossentropy_backward(d.dlogits, dloss, a.logits, a.lse,
                                                      device_targets(), B, T, config_.vocab_size(),
                                                      Vp, stream_));
    // dln = dlogits @ head (a tied head's weight gradient into the embedding's), then the
    // final norm's backward into dresidual.
    TROUPE_CUDA_RETURN_IF_ERROR(zero(d.dln, BTC));
    TROUPE_CUDA_RETURN_IF_ERROR(zero(d.dresidual, BTC));
    return head_norm_backward();
  }
  absl::Status backward_blocks(int begin, int end, const GradientsFinal& on_final) override {
    TROUPE_CUDA_RETURN_IF_ERROR(store_.check_blocks(begin, end, "backward_blocks"));
    for (int l = end - 1; l >= begin; --l)
      TROUPE_CUDA_RETURN_IF_ERROR(block_backward(l, on_final));
    return absl::OkStatus();
  }
  absl::Status embed_backward_rows(float*, std::span<const int32_t>, int) override {
    return absl::FailedPreconditionError(
        absl::StrCat(name_, "::embed_backward_rows: not built for CUDA yet; use embed_backward"));
  }

  float* residual(int l) override {
    const size_t BTC = store_.BT() * config_.hidden_size();
    const int begin = store_.part_begin();
    return l == begin ? store_.acts().encoded : store_.acts().residual3 + (l - 1 - begin) * BTC;
  }
  float* dresidual() override { return store_.grads().dresidual; }

  ModelMemory memory() const override {
    size_t tokens = 0;
    for (const FloatBuffer& t : tokens_)
      tokens += t.bytes();
    return {.parameters = params_.bytes(),
            .gradients = grads_.bytes(),
            .activations = store_.activation_bytes() + tokens,
            .activation_gradients = store_.scratch_bytes()};
  }

 protected:
  CudaModel(std::string name, const ModelConfig& config, const ModelOptions& options,
            const ModelStorage& storage, int device, cudaStream_t stream, Cublas blas)
      : name_(std::move(name)),
        config_(config),
        options_(options),
        storage_(storage),
        stream_(stream),
        blas_(std::move(blas)),
        store_(name_, config.num_layers(), Device::cuda(device)),
        tokens_(1) {
    storage_.device = Device::cuda(device);
  }

  // The architecture's: the embedding of the current inputs into residual(0) (on the device:
  // device_inputs()); block l's forward and backward (reporting each run of final gradients with
  // report_final); the final norm and the head's product into logits; and their backward from
  // dlogits into dln (zeroed) and dresidual (zeroed).
  virtual absl::Status embed() = 0;
  virtual absl::Status block_forward(int l) = 0;
  virtual absl::Status block_backward(int l, const GradientsFinal& on_final) = 0;
  virtual absl::Status head_logits() = 0;
  virtual absl::Status head_norm_backward() = 0;

  // The model's own buffers, as storage_ asks (zeroed), or none.
  absl::Status allocate_buffers() {
    const size_t n = num_params();
    if (storage_.parameters) {
      TROUPE_CUDA_RETURN_IF_ERROR(params_.reset(MemoryCategory::kParameters, n, true, device()));
    }
    if (storage_.gradients) {
      TROUPE_CUDA_RETURN_IF_ERROR(grads_.reset(MemoryCategory::kGradients, n, true, device()));
    }
    return absl::OkStatus();
  }

  // InvalidArgument unless 1 <= T <= max_seq_len and no activation of B x T positions of
  // `widest` values (or B x NH x T x T attention) passes INT_MAX elements.
  absl::Status check_shape(int B, int T, int64_t widest, int heads) const {
    const int maxT = config_.max_seq_len();
    if (B < 1 || T < 1 || T > maxT) {
      return absl::InvalidArgumentError(absl::StrCat(name_, ": batch B = ", B, ", T = ", T,
                                                     " needs B >= 1 and 1 <= T <= ", maxT));
    }
    const int64_t BT = int64_t{B} * T;
    if (BT * widest > INT_MAX || BT * heads * T > INT_MAX) {
      return absl::InvalidArgumentError(absl::StrCat(name_, ": batch B = ", B, ", T = ", T,
                                                     " makes an activation over INT_MAX elements"));
    }
    return absl::OkStatus();
  }
  // The store laid out for (B, T) (already checked) with the carvers, and each slot's tokens.
  template <typename CarveActs, typename CarveGrads>
  absl::Status prepare_store(int B, int T, CarveActs&& carve_acts, CarveGrads&& carve_grads) {
    if (B == store_.B() && T == store_.T()) return absl::OkStatus();
    TROUPE_CUDA_RETURN_IF_ERROR(store_.prepare(B, T, carve_acts, carve_grads));
    // Each slot's inputs and targets on the device: 2 BT int32s in float-sized cells.
    const size_t cells = 2 * store_.BT();
    for (FloatBuffer& t : tokens_) {
      if (t.size() >= cells) continue;
      TROUPE_CUDA_RETURN_IF_ERROR(t.reset(MemoryCategory::kActivations, cells, false, device()));
    }
    return absl::OkStatus();
  }

  // The current slot's device copy of its inputs (targets): BT int32s each.
  int32_t* device_inputs() {
    return reinterpret_cast<int32_t*>(tokens_[static_cast<size_t>(store_.slot())].data());
  }
  int32_t* device_targets() { return device_inputs() + store_.BT(); }
  absl::Status upload_tokens(int32_t* to, const int32_t* host) {
    return copy_bytes(to, device(), host, Device::cpu(),
                      static_cast<int64_t>(store_.BT() * sizeof(int32_t)));
  }
  // n floats at p set to zero, queued on the stream.
  absl::Status zero(float* p, size_t n) const {
    return detail::cuda_status(cudaMemsetAsync(p, 0, n * sizeof(float), stream_),
                               "cudaMemsetAsync");
  }

  // Reports `offset` to on_final as soon as the kernels that finish it are queued: final in the
  // device's order. What reads it next goes through the device after them - a copy, or a
  // collective whose stream waits for the work queued before it (the backend's streams are
  // blocking: nn/cuda/backend.cc) - so the host need not wait, and backward keeps the device busy.
  absl::Status report_final(const GradientsFinal& on_final, size_t offset) const {
    if (on_final) on_final(offset);
    return absl::OkStatus();
  }

  std::string name_;
  ModelConfig config_;
  ModelOptions options_;
  ModelStorage storage_;
  cudaStream_t stream_;
  Cublas blas_;
  ActivationStore<Acts, Grads> store_;
  std::vector<FloatBuffer> tokens_;  // a slot's inputs and targets on the device
  FloatBuffer params_;               // the model's own, when storage_ asks for them
  FloatBuffer grads_;
};

}  // namespace troupe::nn::cuda
