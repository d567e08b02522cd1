// What the models of libtroupe_nn_cuda share (nn/cuda/gpt.h, nn/cuda/llama.h): the device, its
// stream and cuBLAS handle, the activation store in device memory with each slot's tokens on the
// device, and the pieces of the seam that do not depend on the architecture. `Acts` and `Grads`
// are an architecture's structs of pointers into a slot's buffer and the scratch.
// Compiled only in builds with CUDA.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
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

template <typename Acts, typename Grads>
class CudaModel : public Model {
 public:
  Device device() const override { return device_; }
  void set_tensor_parallel(AllReduceFn, AllReduceFn) override {}  // one rank: nothing to reduce

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

  absl::Status embed_backward_rows(float*, std::span<const int32_t>, int) override {
    return absl::FailedPreconditionError(
        absl::StrCat(name_, "::embed_backward_rows: not built for CUDA yet; use embed_backward"));
  }

 protected:
  CudaModel(std::string name, int num_layers, Device device, cudaStream_t stream, Cublas blas)
      : name_(std::move(name)),
        device_(device),
        stream_(stream),
        blas_(std::move(blas)),
        store_(name_, num_layers, device),
        tokens_(1) {}

  // The store laid out for (B, T) (already checked) with the carvers, and each slot's tokens.
  template <typename CarveActs, typename CarveGrads>
  absl::Status prepare_store(int B, int T, CarveActs&& carve_acts, CarveGrads&& carve_grads) {
    if (B == store_.B() && T == store_.T()) return absl::OkStatus();
    TROUPE_CUDA_RETURN_IF_ERROR(store_.prepare(B, T, carve_acts, carve_grads));
    // Each slot's inputs and targets on the device: 2 BT int32s in float-sized cells.
    const size_t cells = 2 * store_.BT();
    for (FloatBuffer& t : tokens_) {
      if (t.size() >= cells) continue;
      TROUPE_CUDA_RETURN_IF_ERROR(t.reset(MemoryCategory::kActivations, cells, false, device_));
    }
    return absl::OkStatus();
  }

  // The current slot's device copy of its inputs (targets): BT int32s each.
  int32_t* device_inputs() {
    return reinterpret_cast<int32_t*>(tokens_[static_cast<size_t>(store_.slot())].data());
  }
  int32_t* device_targets() { return device_inputs() + store_.BT(); }
  absl::Status upload_tokens(int32_t* to, const int32_t* host) {
    return copy_bytes(to, device_, host, Device::cpu(),
                      static_cast<int64_t>(store_.BT() * sizeof(int32_t)));
  }
  // The loss the head left at `loss` (a device float), waiting for the device.
  absl::StatusOr<float> download_loss(const float* loss) {
    float host = 0;
    TROUPE_CUDA_RETURN_IF_ERROR(copy_bytes(&host, Device::cpu(), loss, device_, sizeof(float)));
    return host;
  }

  // n floats at p set to zero, queued on the stream.
  absl::Status zero(float* p, size_t n) const {
    return detail::cuda_status(cudaMemsetAsync(p, 0, n * sizeof(float), stream_),
                               "cudaMemsetAsync");
  }

  // Reports `offset` to on_final once the device has caught up: what it says is final is final
  // in memory.
  absl::Status report_final(const GradientsFinal& on_final, size_t offset) const {
    if (!on_final) return absl::OkStatus();
    TROUPE_CUDA_RETURN_IF_ERROR(
        detail::cuda_status(cudaStreamSynchronize(stream_), "backward_blocks"));
    on_final(offset);
    return absl::OkStatus();
  }

  ModelMemory memory_of(size_t parameter_bytes, size_t gradient_bytes) const {
    size_t tokens = 0;
    for (const FloatBuffer& t : tokens_)
      tokens += t.bytes();
    return {.parameters = parameter_bytes,
            .gradients = gradient_bytes,
            .activations = store_.activation_bytes() + tokens,
            .activation_gradients = store_.scratch_bytes()};
  }

  std::string name_;
  Device device_;
  cudaStream_t stream_;
  Cublas blas_;
  ActivationStore<Acts, Grads> store_;
  std::vector<FloatBuffer> tokens_;  // a slot's inputs and targets on the device
};

}  // namespace troupe::nn::cuda
