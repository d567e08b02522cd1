// GPT-2 on a CUDA device: nn/gpt2's model (the same layout, the same pieces, the same contract:
// nn/model/model.h) with its parameters, gradients and activations in device memory and its
// work queued on the device's stream (the CUDA backend's), through the layers of
// nn/cuda/layers.h in fp32 (cuBLAS in pedantic fp32: no TF32).
//
// The seam stays host-facing where it returns values: forward, head_forward and the inputs and
// targets they take are host memory (copied to the device); the loss comes back to the host,
// waiting for the device. params(), grads(), logits(), residual() and dresidual() are device
// pointers; what `on_final` reports is final in the device's order (a copy or a collective
// issued after it reads it: nn/cuda/cuda_model.h).
//
// Recomputed activations (ModelOptions::recompute_activations) and tensor parallelism (a slice
// of more than one rank, its group's all-reduces on device buffers: nn/cuda/cuda_model.h) work as
// on the CPU. Not yet on CUDA: embed_backward_rows (FailedPrecondition, naming it); make_decoder
// is Unimplemented.
// Compiled only in builds with CUDA, into libtroupe_nn_cuda.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "nn/gpt2/config.h"
#include "nn/model/model.h"

namespace troupe::nn::cuda {

// A GPT-2 of `config` on CUDA device `device` (ModelStorage::device's index).
[[nodiscard]] absl::StatusOr<std::unique_ptr<Model>> create_gpt(int device, const GPTConfig& config,
                                                                const ModelOptions& options,
                                                                const ModelStorage& storage,
                                                                const TensorSlice& slice);

}  // namespace troupe::nn::cuda
