// CUDA and cuBLAS codes to absl::Status at the call site, for nn/cuda/*.
#pragma once

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "nn/cuda/detail/cublas.h"

namespace troupe::nn::cuda::detail {

// OK when `code` is cudaSuccess; else Internal naming the layer call that failed and the code.
inline absl::Status cuda_status(cudaError_t code, const char* what) {
  if (code == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("cuda ", what, ": ", cudaGetErrorName(code), " (",
                                          cudaGetErrorString(code), ")"));
}

// The launch status of the kernels just enqueued (cudaGetLastError: it also reports, and clears,
// an asynchronous error of earlier work on the device).
inline absl::Status launch_status(const char* what) {
  return cuda_status(cudaGetLastError(), what);
}

inline absl::Status cublas_status(cublasStatus_t code, const char* what) {
  if (code == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  if (!cublas_loaded()) return absl::InternalError(absl::StrCat("cublas ", what, ": ", code));
  return absl::InternalError(absl::StrCat("cublas ", what, ": ", cublas().status_name(code), " (",
                                          cublas().status_string(code), ")"));
}

}  // namespace troupe::nn::cuda::detail
