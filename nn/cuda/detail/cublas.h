// cuBLAS, loaded when a GPU first needs it rather than when the program starts: libcublasLt,
// which libcublas loads, holds about 150 MB resident in every process that maps it, GPU or not
// (its relocations and zeroed data), so a CPU run of troupe would pay for it on every rank.
// nn/cuda/* call cuBLAS through cublas() below; the types and constants come from cublas_v2.h.
//
//   if (absl::Status s = detail::load_cublas(); !s.ok()) return s;
//   detail::cublas().sgemm(handle, ...);
#pragma once

#include <cublas_v2.h>

#include "absl/status/status.h"

namespace troupe::nn::cuda::detail {

// The cuBLAS functions nn uses, from libcublas.so.<CUBLAS_VER_MAJOR>.
struct CublasApi {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasDestroy_v2) destroy = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  decltype(&cublasSetMathMode) set_math_mode = nullptr;
  decltype(&cublasSgemm_v2) sgemm = nullptr;
  decltype(&cublasSgemmStridedBatched) sgemm_strided_batched = nullptr;
  // cublasGemmEx with a cublasComputeType_t (the header overloads it in C++).
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                            const void*, const void*, cudaDataType, int, const void*, cudaDataType,
                            int, const void*, void*, cudaDataType, int, cublasComputeType_t,
                            cublasGemmAlgo_t) = nullptr;
  // cublasGemmStridedBatchedEx, likewise.
  cublasStatus_t (*gemm_strided_batched_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t,
                                            int, int, int, const void*, const void*, cudaDataType,
                                            int, long long, const void*, cudaDataType, int,
                                            long long, const void*, void*, cudaDataType, int,
                                            long long, int, cublasComputeType_t,
                                            cublasGemmAlgo_t) = nullptr;
  decltype(&cublasGetStatusName) status_name = nullptr;
  decltype(&cublasGetStatusString) status_string = nullptr;
};

// Loads the library and its functions, once per process (thread-safe; later calls return the
// first one's result). FailedPrecondition naming the library or the function when it cannot.
absl::Status load_cublas();
// REQUIRES: load_cublas() returned OK.
const CublasApi& cublas();
// Whether load_cublas() has succeeded.
bool cublas_loaded();

}  // namespace troupe::nn::cuda::detail
