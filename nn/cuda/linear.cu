// nn/cuda/layers.h: the fully connected layer, the Cublas handle. Row-major products through
// column-major cuBLAS: a row-major [M, N] matrix is a column-major [N, M] one, so
// out = inp @ weight^T is out^T = weight @ inp^T in cuBLAS's terms (llm.c's calls).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <type_traits>
#include <utility>

#include "nn/cuda/detail/check.h"
#include "nn/cuda/detail/operands.h"
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

template <typename Half>
__global__ void round_kernel(Half* out, const float* in, size_t n) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    if constexpr (sizeof(Half) == 2 && std::is_same_v<Half, __nv_bfloat16>) {
      out[i] = __float2bfloat16_rn(in[i]);
    } else {
      out[i] = __float2half_rn(in[i]);
    }
  }
}

// C [m, n] = alpha op(A) op(B) + beta C in column-major terms, A holding a_elems floats and B
// b_elems: sgemm for fp32 inputs, else both rounded into the handle's scratch and cublasGemmEx
// accumulating in fp32.
absl::Status gemm(const Cublas& blas, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                  int k, const float* A, int lda, size_t a_elems, const float* B, int ldb,
                  size_t b_elems, float beta, float* C, int ldc, const char* what,
                  cudaStream_t stream) {
  const float one = 1.0f;
  cublasHandle_t h = blas.handle();
  const GemmInputs inputs = blas.inputs();
  if (inputs == GemmInputs::kFloat32) {
    return detail::cublas_status(
        detail::cublas().sgemm(h, ta, tb, m, n, k, &one, A, lda, B, ldb, &beta, C, ldc), what);
  }
  // A's 16-bit copy, then B's from the next 256-byte boundary.
  const size_t b_offset = detail::operand_bytes(a_elems, inputs);
  absl::StatusOr<void*> scratch =
      blas.scratch(b_offset + detail::operand_bytes(b_elems, inputs), stream);
  if (!scratch.ok()) return scratch.status();
  void* a16 = *scratch;
  void* b16 = static_cast<char*>(*scratch) + b_offset;
  if (absl::Status s = detail::round_operand(a16, A, a_elems, inputs, stream); !s.ok()) return s;
  if (absl::Status s = detail::round_operand(b16, B, b_elems, inputs, stream); !s.ok()) return s;
  const cudaDataType type = detail::operand_type(inputs);
  return detail::cublas_status(
      detail::cublas().gemm_ex(h, ta, tb, m, n, k, &one, a16, type, lda, b16, type, ldb, &beta, C,
                               CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
      what);
}

}  // namespace

namespace detail {

cudaDataType operand_type(GemmInputs inputs) {
  switch (inputs) {
    case GemmInputs::kBFloat16:
      return CUDA_R_16BF;
    case GemmInputs::kFloat16:
      return CUDA_R_16F;
    case GemmInputs::kFloat32:
      break;
  }
  return CUDA_R_32F;
}

size_t operand_bytes(size_t n, GemmInputs inputs) {
  const size_t bytes = n * (inputs == GemmInputs::kFloat32 ? 4 : 2);
  return (bytes + 255) / 256 * 256;
}

absl::Status round_operand(void* out, const float* in, size_t n, GemmInputs inputs,
                           cudaStream_t stream) {
  if (n == 0) return absl::OkStatus();
  if (inputs == GemmInputs::kBFloat16) {
    round_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(static_cast<__nv_bfloat16*>(out),
                                                                 in, n);
  } else {
    round_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(static_cast<__half*>(out), in, n);
  }
  return launch_status("round_operand");
}

}  // namespace detail

absl::StatusOr<Cublas> Cublas::create(GemmInputs inputs) {
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
  Cublas blas(handle, inputs);
  // fp32 products in fp32 (no TF32); 16-bit operands on the tensor cores.
  const cublasMath_t mode =
      inputs == GemmInputs::kFloat32 ? CUBLAS_PEDANTIC_MATH : CUBLAS_DEFAULT_MATH;
  if (absl::Status s =
          detail::cublas_status(detail::cublas().set_math_mode(handle, mode), "cublasSetMathMode");
      !s.ok()) {
    return s;
  }
  return blas;
}

Cublas::Cublas(Cublas&& other) noexcept
    : handle_(std::exchange(other.handle_, nullptr)),
      inputs_(other.inputs_),
      scratch_(std::exchange(other.scratch_, nullptr)),
      scratch_bytes_(std::exchange(other.scratch_bytes_, 0)),
      scratch_stream_(other.scratch_stream_) {}

Cublas& Cublas::operator=(Cublas&& other) noexcept {
  if (this != &other) {
    if (handle_ != nullptr) detail::cublas().destroy(handle_);
    if (scratch_ != nullptr) cudaFreeAsync(scratch_, scratch_stream_);
    handle_ = std::exchange(other.handle_, nullptr);
    inputs_ = other.inputs_;
    scratch_ = std::exchange(other.scratch_, nullptr);
    scratch_bytes_ = std::exchange(other.scratch_bytes_, 0);
    scratch_stream_ = other.scratch_stream_;
  }
  return *this;
}

Cublas::~Cublas() {
  if (handle_ != nullptr) detail::cublas().destroy(handle_);
  if (scratch_ != nullptr) cudaFreeAsync(scratch_, scratch_stream_);
}

absl::StatusOr<void*> Cublas::scratch(size_t bytes, cudaStream_t stream) const {
  if (bytes <= scratch_bytes_ && stream == scratch_stream_) return scratch_;
  if (scratch_ != nullptr) cudaFreeAsync(scratch_, scratch_stream_);
  scratch_ = nullptr;
  scratch_bytes_ = 0;
  if (absl::Status s =
          detail::cuda_status(cudaMallocAsync(&scratch_, bytes, stream), "cudaMallocAsync");
      !s.ok()) {
    return s;
  }
  scratch_bytes_ = bytes;
  scratch_stream_ = stream;
  return scratch_;
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
  const size_t in = static_cast<size_t>(BT) * C, w = static_cast<size_t>(OC) * C;
  // out^T [OC, BT] = weight [OC, C] @ inp^T [C, BT] (column-major).
  return gemm(blas, CUBLAS_OP_T, CUBLAS_OP_N, OC, BT, C, weight, C, w, inp, C, in, beta, out, OC,
              "linear_forward gemm", stream);
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
  const size_t in = static_cast<size_t>(BT) * C, w = static_cast<size_t>(OC) * C;
  const size_t out = static_cast<size_t>(BT) * OC;
  if (dinp != nullptr) {
    // dinp^T [C, BT] += weight^T [C, OC] @ dout^T [OC, BT].
    if (absl::Status s = gemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, C, BT, OC, weight, C, w, dout, OC,
                              out, 1.0f, dinp, C, "linear_backward dinp gemm", stream);
        !s.ok()) {
      return s;
    }
  }
  // dweight^T [C, OC] += inp^T [C, BT] @ dout [BT, OC].
  if (absl::Status s = gemm(blas, CUBLAS_OP_N, CUBLAS_OP_T, C, OC, BT, inp, C, in, dout, OC, out,
                            1.0f, dweight, C, "linear_backward dweight gemm", stream);
      !s.ok()) {
    return s;
  }
  if (dbias == nullptr) return absl::OkStatus();
  column_sum_kernel<<<(OC + 31) / 32, dim3(32, 32), 0, stream>>>(dbias, dout, BT, OC);
  return detail::launch_status("linear_backward dbias");
}

}  // namespace troupe::nn::cuda
