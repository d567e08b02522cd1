// What the CUDA backend (backend.cc) keeps per device, for the models and kernels of
// libtroupe_nn_cuda: the device's stream. Compiled only in builds with CUDA.
#pragma once

#include <cuda_runtime_api.h>

#include "absl/status/statusor.h"

namespace troupe::nn::cuda {

// The stream of device `index`, on which the backend queues every call for that device, with the
// device made current on the calling thread (cudaSetDevice). FailedPrecondition when the device
// cannot be used.
[[nodiscard]] absl::StatusOr<cudaStream_t> device_stream(int index);

}  // namespace troupe::nn::cuda
