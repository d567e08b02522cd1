// The 16-bit operands of the tensor-core products (GemmInputs::kBFloat16, kFloat16): fp32 values
// rounded to nearest even into a copy, which cuBLAS reads with accumulation in fp32.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstddef>

#include "absl/status/status.h"
#include "nn/cuda/layers.h"

namespace troupe::nn::cuda::detail {

// cuBLAS's name for the operand type of `inputs`: CUDA_R_32F, CUDA_R_16BF or CUDA_R_16F.
cudaDataType operand_type(GemmInputs inputs);
// Bytes an operand of n values takes, rounded up to 256 (so the next starts aligned, as the
// tensor-core kernels want).
size_t operand_bytes(size_t n, GemmInputs inputs);
// in[0, n) rounded to the 16-bit type of `inputs` at out, queued on `stream`.
// REQUIRES: inputs is kBFloat16 or kFloat16.
[[nodiscard]] absl::Status round_operand(void* out, const float* in, size_t n, GemmInputs inputs,
                                         cudaStream_t stream);

}  // namespace troupe::nn::cuda::detail
