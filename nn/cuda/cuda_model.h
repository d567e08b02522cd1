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
// options.matmul.
inline absl::StatusOr<std::pair<cudaStream_t, Cublas>> open_device(int device,
                                                                   const ModelOptions& options) {
  absl::StatusOr<cudaStream_t> stream = device_stream(device);
  if (!stream.ok()) return stream.status();
  absl::StatusOr<Cublas> blas = Cublas::create(gemm_inputs(options.matmul));
  if (!blas.ok()) return blas.status();
  return std::pair<cudaStream_t, Cublas>(*stream, *std::move(blas));
}

// The model seam's pieces that are the same for every architecture on the device: the forward
// and backward in pieces, the head's loss and its gradient, the buffers, the slots, and tensor
// parallelism's vocabulary split, sums over the group and row-parallel products. An architecture
// gives its embedding, its blocks, its head's norm and product and their backward.
// `Acts` must have encoded, residual3, lnf, logits, lse, losses and loss; `Grads` dresidual, dln
// and dlogits.
//
// Tensor parallelism (nn/layers/parallel.h's scheme, as the CPU models): the group's all-reduces
// (set_tensor_parallel) take device pointers. Before each the model waits for its stream, so the
// buffer is ready when the collective starts (a CollectiveGroup's contract for device buffers);
// the collective returns with the result in device memory, ready for the kernels queued after.
template <typename Acts, typename Grads>
class CudaModel : public Model {
 public:
  const ModelConfig& config() const override { return config_; }
  const ModelOptions& options() const override { return options_; }
  Device device() const override { return storage_.device; }
  void set_tensor_parallel(AllReduceFn allreduce_sum, AllReduceFn allreduce_max) override {
    tp_sum_ = std::move(allreduce_sum);
    tp_max_ = std::move(allreduce_max);
  }

  // Made on the host, as the CPU models make them, then copied over.
  void init_parameters(uint64_t seed) override {
    if (params_.data() == nullptr) return;  // bound parameters are the caller's to fill
    if (!make_current().ok()) return;       // an unusable device fails the next piece, saying why
    std::vector<float> host(num_params());
    nn::init_parameters(config_, layout().slice(), seed, 0, host.size(), host.data());
    (void)copy_bytes(params_.data(), device(), host.data(), Device::cpu(),
                     static_cast<int64_t>(host.size() * sizeof(float)));
  }
  float* params() override { return params_.data(); }
  float* grads() override { return grads_.data(); }
  void zero_grad() override {
    if (grads_.data() != nullptr && make_current().ok()) (void)zero(grads_.data(), grads_.size());
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
    TROUPE_CUDA_RETURN_IF_ERROR(make_current());
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
    TROUPE_CUDA_RETURN_IF_ERROR(make_current());
    for (int l = begin; l < end; ++l)
      TROUPE_CUDA_RETURN_IF_ERROR(block_forward(l));
    return absl::OkStatus();
  }
  absl::StatusOr<float> head_forward(const int32_t* targets) override {
    TROUPE_CUDA_RETURN_IF_ERROR(store_.check_prepared("head_forward"));
    TROUPE_CUDA_RETURN_IF_ERROR(make_current());
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
    if (sliced()) {
      if (absl::Status s = sliced_loss(a); !s.ok()) {
        store_.clear_targets();
        return s;
      }
    } else {
      TROUPE_CUDA_RETURN_IF_ERROR(
          crossentropy_forward(a.loss, a.losses, a.lse, a.logits, device_targets(), store_.B(),
                               store_.T(), config_.vocab_size(), config_.padded_vocab(), stream_));
    }
    float loss = 0;
    TROUPE_CUDA_RETURN_IF_ERROR(copy_bytes(&loss, Device::cpu(), a.loss, device(), sizeof(float)));
    return loss;
  }
  absl::Status head_backward(float dloss) override {
    if (!store_.have_targets()) {
      return absl::FailedPreconditionError(absl::StrCat(
          name_, "::backward: the last forward had no targets; run forward with targets first"));
    }
    TROUPE_CUDA_RETURN_IF_ERROR(make_current());
    const int B = store_.B(), T = store_.T(), V = config_.vocab_size();
    const size_t BT = store_.BT(), BTC = BT * config_.hidden_size();
    const Acts& a = store_.acts();
    const Grads& d = store_.grads();
    // Its columns of the vocabulary, padding included (which the loss leaves at zero).
    TROUPE_CUDA_RETURN_IF_ERROR(zero(d.dlogits, BT * local_vocab_));
    if (sliced()) {
      TROUPE_CUDA_RETURN_IF_ERROR(
          vocab_parallel_crossentropy_backward(d.dlogits, dloss, a.logits, a.lse, device_targets(),
                                               vocab_begin_, local_vocab_, V, B, T, stream_));
    } else {
      TROUPE_CUDA_RETURN_IF_ERROR(crossentropy_backward(
          d.dlogits, dloss, a.logits, a.lse, device_targets(), B, T, V, local_vocab_, stream_));
    }
    // dln = dlogits @ head (a tied head's weight gradient into the embedding's), summed over the
    // group's vocabularies, then the final norm's backward into dresidual.
    TROUPE_CUDA_RETURN_IF_ERROR(zero(d.dln, BTC));
    TROUPE_CUDA_RETURN_IF_ERROR(zero(d.dresidual, BTC));
    TROUPE_CUDA_RETURN_IF_ERROR(head_product_backward());
    TROUPE_CUDA_RETURN_IF_ERROR(sum_over_slices(d.dln, BTC));
    return head_norm_backward();
  }
  absl::Status backward_blocks(int begin, int end, const GradientsFinal& on_final) override {
    TROUPE_CUDA_RETURN_IF_ERROR(store_.check_blocks(begin, end, "backward_blocks"));
    TROUPE_CUDA_RETURN_IF_ERROR(make_current());
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
            .activations = store_.activation_bytes() + tokens + tp_sums_.bytes(),
            .activation_gradients = store_.scratch_bytes()};
  }

 protected:
  CudaModel(std::string name, const ModelConfig& config, const ModelOptions& options,
            const ModelStorage& storage, const TensorSlice& slice, int device, cudaStream_t stream,
            Cublas blas)
      : name_(std::move(name)),
        config_(config),
        options_(options),
        storage_(storage),
        slice_(slice),
        local_vocab_(config.padded_vocab() / slice.size),
        vocab_begin_(slice.rank * local_vocab_),
        stream_(stream),
        blas_(std::move(blas)),
        store_(name_, config.num_layers(), Device::cuda(device)),
        tokens_(1) {
    storage_.device = Device::cuda(device);
  }

  // The architecture's: the embedding of the current inputs into residual(0) (on the device:
  // device_inputs()); block l's forward and backward (reporting each run of final gradients with
  // report_final); the final norm and the head's product into logits (this rank's local_vocab()
  // columns); and their backward from dlogits into dln (zeroed; summed over the group between
  // the two) and dresidual (zeroed).
  virtual absl::Status embed() = 0;
  virtual absl::Status block_forward(int l) = 0;
  virtual absl::Status block_backward(int l, const GradientsFinal& on_final) = 0;
  virtual absl::Status head_logits() = 0;
  virtual absl::Status head_product_backward() = 0;  // dln += dlogits @ head (this rank's rows)
  virtual absl::Status head_norm_backward() = 0;     // dresidual from dln

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
    if (sliced() && (!tp_sum_ || !tp_max_)) {
      return absl::FailedPreconditionError(
          absl::StrCat(name_, ": tensor-parallel rank ", slice_.rank, " of ", slice_.size,
                       " has no group to reduce over (set_tensor_parallel)"));
    }
    TROUPE_CUDA_RETURN_IF_ERROR(make_current());
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
  // The model's device made current on the calling thread: an actor's handlers may run on any of
  // its scheduler's threads, and a kernel must be launched with its stream's device current.
  absl::Status make_current() const {
    return detail::cuda_status(cudaSetDevice(storage_.device.index), "cudaSetDevice");
  }

  // --- Tensor parallelism (a slice of more than one rank). ---
  bool sliced() const { return slice_.size > 1; }
  int local_vocab() const { return local_vocab_; }  // the padded vocabulary for one rank
  int vocab_begin() const { return vocab_begin_; }
  // `reduce` (the group's sum or max) over n floats at device pointer p, once the stream has
  // written them.
  absl::Status reduce_over_slices(const AllReduceFn& reduce, float* p, size_t n) const {
    TROUPE_CUDA_RETURN_IF_ERROR(
        detail::cuda_status(cudaStreamSynchronize(stream_), "tensor-parallel all-reduce"));
    return reduce(p, n);
  }
  // The group's sum of n floats at p: a column-parallel product's partial input gradient. Nothing
  // for one rank.
  absl::Status sum_over_slices(float* p, size_t n) const {
    if (!sliced()) return absl::OkStatus();
    return reduce_over_slices(tp_sum_, p, n);
  }
  // out[B*T, C] = in[B*T, in_channels] @ weight^T + bias (bias may be null): with tensor
  // parallelism a row-parallel product, in and weight this rank's columns, the group's sum taken
  // before the bias (or it would be added tp times).
  absl::Status project_rows(float* out, const float* in, const float* weight, const float* bias,
                            int in_channels) {
    const int B = store_.B(), T = store_.T(), C = config_.hidden_size();
    if (!sliced()) {
      return linear_forward(blas_, out, in, weight, bias, B, T, in_channels, C, stream_);
    }
    TROUPE_CUDA_RETURN_IF_ERROR(
        linear_forward(blas_, out, in, weight, nullptr, B, T, in_channels, C, stream_));
    TROUPE_CUDA_RETURN_IF_ERROR(sum_over_slices(out, store_.BT() * C));
    if (bias == nullptr) return absl::OkStatus();
    return add_rows(out, bias, store_.BT(), 1, C, stream_);
  }
  // The embedding of the current inputs into residual(0) from this rank's rows of `table`, summed
  // over the group, then the positions wpe [maxT, C] added (null: none). One rank copies rows.
  absl::Status embed_rows(const float* table, const float* wpe) {
    const int B = store_.B(), T = store_.T(), C = config_.hidden_size();
    float* out = store_.acts().encoded;
    TROUPE_CUDA_RETURN_IF_ERROR(embedding_rows_forward(
        out, device_inputs(), table, vocab_begin_, vocab_begin_ + local_vocab_, B, T, C, stream_));
    TROUPE_CUDA_RETURN_IF_ERROR(sum_over_slices(out, store_.BT() * C));
    if (wpe == nullptr) return absl::OkStatus();
    return add_rows(out, wpe, store_.BT(), T, C, stream_);
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
  TensorSlice slice_;
  int local_vocab_;  // this rank's columns of the padded vocabulary: all of it for one rank
  int vocab_begin_;
  AllReduceFn tp_sum_, tp_max_;  // the tensor-parallel group's, on device buffers
  cudaStream_t stream_;
  Cublas blas_;
  ActivationStore<Acts, Grads> store_;
  std::vector<FloatBuffer> tokens_;  // a slot's inputs and targets on the device
  FloatBuffer params_;               // the model's own, when storage_ asks for them
  FloatBuffer grads_;
  FloatBuffer tp_sums_;  // the vocab-parallel loss's sums over the group: 2 BT floats

 private:
  // The head's mean loss into a.loss across the group's vocabularies: the rows' maxes (in lse)
  // and sums, each all-reduced, then lse and the losses (parallel.h's vocab-parallel loss).
  absl::Status sliced_loss(const Acts& a) {
    const int B = store_.B(), T = store_.T(), V = config_.vocab_size();
    const size_t BT = store_.BT();
    if (tp_sums_.size() < 2 * BT) {
      TROUPE_CUDA_RETURN_IF_ERROR(
          tp_sums_.reset(MemoryCategory::kActivations, 2 * BT, false, device()));
    }
    TROUPE_CUDA_RETURN_IF_ERROR(
        vocab_parallel_max(a.lse, a.logits, vocab_begin_, local_vocab_, V, B, T, stream_));
    TROUPE_CUDA_RETURN_IF_ERROR(reduce_over_slices(tp_max_, a.lse, BT));
    TROUPE_CUDA_RETURN_IF_ERROR(vocab_parallel_sums(tp_sums_.data(), a.logits, a.lse,
                                                    device_targets(), vocab_begin_, local_vocab_, V,
                                                    B, T, stream_));
    TROUPE_CUDA_RETURN_IF_ERROR(reduce_over_slices(tp_sum_, tp_sums_.data(), 2 * BT));
    return vocab_parallel_loss(a.loss, a.losses, a.lse, a.lse, tp_sums_.data(), B, T, stream_);
  }
};

}  // namespace troupe::nn::cuda
