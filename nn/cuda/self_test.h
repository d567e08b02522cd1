// A small kernel whose result is checked on the host: the CUDA backend's self_test.
#pragma once

#include <cuda_runtime_api.h>

#include "absl/status/status.h"

namespace troupe::nn::cuda {

// Runs on the calling thread's current device, on `stream`, and waits for it. FailedPrecondition
// when the device cannot run it (with the CUDA error), Internal on a wrong result.
[[nodiscard]] absl::Status self_test(cudaStream_t stream);

}  // namespace troupe::nn::cuda
