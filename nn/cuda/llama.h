// Llama on a CUDA device: nn/llama's model (the same layout, pieces and contract:
// nn/model/model.h) with its buffers and activations in device memory, its work on the device's
// stream, through the layers of nn/cuda/layers.h in fp32: RMSNorm, rotary embeddings with
// grouped-query attention packed for the attention kernel, the SwiGLU MLP, an untied or tied head.
// The seam is host-facing where values cross it, as nn/cuda/gpt.h says. Recomputed activations
// and tensor parallelism work as on the CPU. Not yet on CUDA: embed_backward_rows
// (FailedPrecondition, naming it); make_decoder is Unimplemented. Compiled only in builds with
// CUDA.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "nn/llama/config.h"
#include "nn/model/model.h"

namespace troupe::nn::cuda {

// A Llama of `config` on CUDA device `device` (ModelStorage::device's index).
[[nodiscard]] absl::StatusOr<std::unique_ptr<Model>> create_llama(int device,
                                                                  const LlamaConfig& config,
                                                                  const ModelOptions& options,
                                                                  const ModelStorage& storage,
                                                                  const TensorSlice& slice);

}  // namespace troupe::nn::cuda
