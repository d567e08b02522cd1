// nn/cuda/layers.h: the fully connected layer, the Cublas handle. Row-major products through
// column-major cuBLAS: a row-major [M, N] matrix is a column-major [N, M] one, so
// out = inp @ weight^T is out^T = weight @ inp^T in cuBLAS's terms (llm.c's calls).
#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#include "nn/cuda/detail/check.h"
#include "nn/cuda/detail/reduce.h"
#include "nn/cuda/layers.h"

namespace troupe::nn::cuda {
namespace {

constexpr int kThreads = 256;

// out[row, o] = bias[o] over BT*OC: the GEMM then adds (beta = 1), as on the CPU.
__global__ void broadcast_rows_kernel(float* out, const float* bias, size_t BT, int OC) {
  const size_t n = BT * OC;
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x)
    out[i] = bias[i % OC];
}

// Block (32, 32) per 32 output channels: dbias[o] += sum over rows of dout[row, o].
__global__ void column_sum_kernel(float* dbias, const float* dout, int BT, int OC) {
  __shared__ float shared[32][33];
  const int o = blockIdx.x * 32 + threadIdx.x;
  float partial = 0.0f;
  if (o < OC) {
    for (int row = threadIdx.y; row < BT; row += 32)
      partial += dout[static_cast<size_t>(row) * OC + o];
  }
  const float sum = detail::column_sum(partial, shared);
  if (threadIdx.y == 0 && o < OC) dbias[o] += sum;
}

}  // namespace

absl::StatusOr<Cublas> Cublas::create() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    return absl::FailedPreconditionError("cannot create a cuBLAS handle: no usable CUDA device");
  }
  if (absl::Status s = detail::load_cublas(); !s.ok()) return s;
  cublasHandle_t handle = nullptr;
  if (absl::Status s = detail::cublas_status(detail::cublas().create(&handle), "cublasCreate");
      !s.ok()) {
    return s;
  }
  Cublas blas(handle);
  if (absl::Status s =
          detail::cublas_status(detail::cublas().set_math_mode(handle, CUBLAS_PEDANTIC_MATH),
                                "cublasSetMathMode(CUBLAS_PEDANTIC_MATH)");
      !s.ok()) {
    return s;
  }
  return blas;
}

Cublas::Cublas(Cublas&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}

Cublas& Cublas::operator=(Cublas&& other) noexcept {
  if (this != &other) {
    if (handle_ != nullptr) detail::cublas().destroy(handle_);
    handle_ = std::exchange(other.handle_, nullptr);
  }
  return *this;
}

Cublas::~Cublas() {
  if (handle_ != nullptr) detail::cublas().destroy(handle_);
}

absl::Status linear_forward(const Cublas& blas, float* out, const float* inp, const float* weight,
                            const float* bias, int B, int T, int C, int OC, cudaStream_t stream) {
  const int BT = B * T;
  if (BT == 0 || OC == 0) return absl::OkStatus();
  float beta = 0.0f;
  if (bias != nullptr) {
    const size_t n = static_cast<size_t>(BT) * OC;
    broadcast_rows_kernel<<<detail::grid_for(n, kThreads), kThreads, 0, stream>>>(out, bias, BT,
                                                                                  OC);
    if (absl::Status s = detail::launch_status("linear_forward bias"); !s.ok()) return s;
    beta = 1.0f;
  }
  cublasHandle_t h = blas.handle();
  if (absl::Status s =
          detail::cublas_status(detail::cublas().set_stream(h, stream), "cublasSetStream");
      !s.ok()) {
    return s;
  }
  const float one = 1.0f;
  // out^T [OC, BT] = weight [OC, C] @ inp^T [C, BT] (column-major).
  return detail::cublas_status(detail::cublas().sgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, OC, BT, C, &one,
                                                      weight, C, inp, C, &beta, out, OC),
                               "linear_forward sgemm");
}

absl::Status linear_backward(const Cublas& blas, float* dinp, float* dweight, float* dbias,
                             const float* dout, const float* inp, const float* weight, int B, int T,
                             int C, int OC, cudaStream_t stream) {
  const int BT = B * T;
  if (BT == 0 || OC == 0 || C == 0) return absl::OkStatus();
  cublasHandle_t h = blas.handle();
  if (absl::Status s =
          detail::cublas_status(detail::cublas().set_stream(h, stream), "cublasSetStream");
      !s.ok()) {
    return s;
  }
  const float one = 1.0f;
  if (dinp != nullptr) {
    // dinp^T [C, BT] += weight^T [C, OC] @ dout^T [OC, BT].
    if (absl::Status s =
            detail::cublas_status(detail::cublas().sgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, C, BT, OC,
                                                         &one, weight, C, dout, OC, &one, dinp, C),
                                  "linear_backward dinp sgemm");
        !s.ok()) {
      return s;
    }
  }
  // dweight^T [C, OC] += inp^T [C, BT] @ dout [BT, OC].
  if (absl::Status s =
          detail::cublas_status(detail::cublas().sgemm(h, CUBLAS_OP_N, CUBLAS_OP_T, C, OC, BT, &one,
                                                       inp, C, dout, OC, &one, dweight, C),
                                "linear_backward dweight sgemm");
      !s.ok()) {
    return s;
  }
  if (dbias == nullptr) return absl::OkStatus();
  column_sum_kernel<<<(OC + 31) / 32, dim3(32, 32), 0, stream>>>(dbias, dout, BT, OC);
  return detail::launch_status("linear_backward dbias");
}

}  // namespace troupe::nn::cuda
