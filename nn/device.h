// What compute devices this build and machine offer. The CPU path never needs
// a GPU; CUDA code is compiled in when the toolkit is present at build time.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace troupe::nn {

// True if this build includes the CUDA kernels.
bool cuda_compiled();

// Number of usable CUDA devices; 0 without a GPU, a driver, or CUDA support.
int cuda_device_count();

// Runs a small kernel on device 0 and checks its result. FailedPrecondition
// when no device is usable (with the driver's reason), Internal on a wrong result.
absl::Status cuda_self_test();

// One line describing the devices, for logs and `troupe status`.
std::string describe_devices();

}  // namespace troupe::nn
