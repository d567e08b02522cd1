// nn/cuda/layers.h: causal multi-head attention. For each batch row b, the products over its NH
// heads are one strided-batched GEMM each, reading q, k and v in place in the fused qkv (head h
// at channel h*hs, row stride 3C); the causal softmax and its backward are a warp per score row,
// in fp32. The full T x T scores are computed; the softmax writes 0 above the diagonal, so the
// products with att add exact zeros there. With 16-bit GemmInputs the products' operands (qkv,
// the probabilities, the output's gradient, the scores' gradient) are rounded into the handle's
// scratch and multiplied on the tensor cores, accumulating and writing in fp32, as the linear
// layers' are; fp32 inputs use sgemm in pedantic fp32.
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <initializer_list>
#include <vector>

#include "nn/cuda/detail/check.h"
#include "nn/cuda/detail/operands.h"
#include "nn/cuda/detail/reduce.h"
#include "nn/cuda/layers.h"

namespace troupe::nn::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kRowsPerBlock = kThreads / 32;

// Row r of the [B*NH*T, T] scores, position t = r % T:
// row[0:t] = softmax(scale * row[0:t]) and row(t:T) = 0, as the CPU.
__global__ void causal_softmax_kernel(float* att, size_t rows, int T, float scale) {
  const size_t r = blockIdx.x * size_t{kRowsPerBlock} + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;  // the whole warp
  const int t = static_cast<int>(r % T);
  float* row = att + r * T;
  float maxval = -INFINITY;
  for (int t2 = lane; t2 <= t; t2 += 32)
    maxval = fmaxf(maxval, row[t2]);
  maxval = detail::warp_reduce(maxval, detail::Max{});
  float sum = 0.0f;
  for (int t2 = lane; t2 <= t; t2 += 32) {
    const float e = expf(scale * (row[t2] - maxval));
    row[t2] = e;
    sum += e;
  }
  const float inv = 1.0f / detail::warp_reduce(sum, detail::Sum{});
  for (int t2 = lane; t2 <= t; t2 += 32)
    row[t2] *= inv;
  for (int t2 = t + 1 + lane; t2 < T; t2 += 32)
    row[t2] = 0.0f;
}

// In place on datt: dpreatt = att * (datt - sum(att * datt)) * scale on [0, t], 0 above.
__global__ void causal_softmax_backward_kernel(float* datt, const float* att, size_t rows, int T,
                                               float scale) {
  const size_t r = blockIdx.x * size_t{kRowsPerBlock} + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;
  const int t = static_cast<int>(r % T);
  const float* a = att + r * T;
  float* d = datt + r * T;
  float dot = 0.0f;
  for (int t2 = lane; t2 <= t; t2 += 32)
    dot += a[t2] * d[t2];
  dot = detail::warp_reduce(dot, detail::Sum{});
  for (int t2 = lane; t2 <= t; t2 += 32)
    d[t2] = a[t2] * (d[t2] - dot) * scale;
  for (int t2 = t + 1 + lane; t2 < T; t2 += 32)
    d[t2] = 0.0f;
}

// Where a product's operands are: the fp32 tensors themselves, or 16-bit copies in the handle's
// scratch at the same element offsets.
struct Operands {
  GemmInputs inputs = GemmInputs::kFloat32;
  const void* at(const void* base, size_t offset) const {
    const size_t bytes = inputs == GemmInputs::kFloat32 ? sizeof(float) : 2;
    return static_cast<const char*>(base) + offset * bytes;
  }
};

// One strided-batched GEMM over the NH heads of a batch row (column-major, as cuBLAS):
// C_h = op(A_h) op(B_h) + beta C_h for h < NH, with X_h = X + h * stride_x, A and B of the
// operands' type, C fp32.
absl::Status gemm_heads(cublasHandle_t h, GemmInputs inputs, cublasOperation_t op_a,
                        cublasOperation_t op_b, int m, int n, int k, const void* a, int lda,
                        long long stride_a, const void* b, int ldb, long long stride_b, float beta,
                        float* c, int ldc, long long stride_c, int NH, const char* what) {
  const float one = 1.0f;
  if (inputs == GemmInputs::kFloat32) {
    return detail::cublas_status(
        detail::cublas().sgemm_strided_batched(
            h, op_a, op_b, m, n, k, &one, static_cast<const float*>(a), lda, stride_a,
            static_cast<const float*>(b), ldb, stride_b, &beta, c, ldc, stride_c, NH),
        what);
  }
  const cudaDataType type = detail::operand_type(inputs);
  return detail::cublas_status(
      detail::cublas().gemm_strided_batched_ex(
          h, op_a, op_b, m, n, k, &one, a, type, lda, stride_a, b, type, ldb, stride_b, &beta, c,
          CUDA_R_32F, ldc, stride_c, NH, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
      what);
}

// The fp32 tensor `x` of n values as a product's operand: itself, or rounded into `slot`.
absl::StatusOr<const void*> operand(const float* x, size_t n, GemmInputs inputs, void* slot,
                                    cudaStream_t stream) {
  if (inputs == GemmInputs::kFloat32) return static_cast<const void*>(x);
  if (absl::Status s = detail::round_operand(slot, x, n, inputs, stream); !s.ok()) return s;
  return static_cast<const void*>(slot);
}

// The handle's scratch carved for 16-bit operands of the given sizes, in order; nulls for fp32.
absl::StatusOr<std::vector<void*>> operand_slots(const Cublas& blas,
                                                 std::initializer_list<size_t> sizes,
                                                 cudaStream_t stream) {
  std::vector<void*> slots(sizes.size(), nullptr);
  if (blas.inputs() == GemmInputs::kFloat32) return slots;
  size_t total = 0;
  for (size_t n : sizes)
    total += detail::operand_bytes(n, blas.inputs());
  absl::StatusOr<void*> scratch = blas.scratch(total, stream);
  if (!scratch.ok()) return scratch.status();
  char* p = static_cast<char*>(*scratch);
  size_t i = 0;
  for (size_t n : sizes) {
    slots[i++] = p;
    p += detail::operand_bytes(n, blas.inputs());
  }
  return slots;
}

absl::Status launch_softmax(float* scores, const float* att, size_t rows, int T, float scale,
                            cudaStream_t stream, const char* what) {
  const size_t blocks = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  if (att == nullptr) {
    causal_softmax_kernel<<<blocks, kThreads, 0, stream>>>(scores, rows, T, scale);
  } else {
    causal_softmax_backward_kernel<<<blocks, kThreads, 0, stream>>>(scores, att, rows, T, scale);
  }
  return detail::launch_status(what);
}

}  // namespace

// In cuBLAS's column-major terms a row-major head matrix q [T, hs] (row stride ld) is q^T
// [hs, T] with leading dimension ld, and the row-major scores att [T, T] are att^T; each call
// below names its product both ways.
absl::Status attention_forward(const Cublas& blas, float* out, float* att, const float* inp, int B,
                               int T, int C, int NH, cudaStream_t stream) {
  if (B == 0 || T == 0 || C == 0) return absl::OkStatus();
  const int hs = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const int ld = 3 * C;
  const long long TT = static_cast<long long>(T) * T;
  const size_t nx = static_cast<size_t>(B) * T * ld, na = static_cast<size_t>(B) * NH * TT;
  const GemmInputs inputs = blas.inputs();
  const Operands ops{inputs};
  cublasHandle_t h = blas.handle();
  if (absl::Status s =
          detail::cublas_status(detail::cublas().set_stream(h, stream), "cublasSetStream");
      !s.ok()) {
    return s;
  }
  absl::StatusOr<std::vector<void*>> slots = operand_slots(blas, {nx, na}, stream);
  if (!slots.ok()) return slots.status();
  absl::StatusOr<const void*> x = operand(inp, nx, inputs, (*slots)[0], stream);
  if (!x.ok()) return x.status();
  for (int b = 0; b < B; b++) {
    const size_t q = static_cast<size_t>(b) * T * ld, k = q + C;
    // att[t, s] = q_t . k_s: att^T (s, t) = (k^T)^T (s, i) q^T (i, t).
    if (absl::Status s = gemm_heads(h, inputs, CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs, ops.at(*x, k),
                                    ld, hs, ops.at(*x, q), ld, hs, 0.0f, att + b * NH * TT, T, TT,
                                    NH, "attention_forward q k");
        !s.ok()) {
      return s;
    }
  }
  const size_t rows = static_cast<size_t>(B) * NH * T;
  if (absl::Status s = launch_softmax(att, nullptr, rows, T, scale, stream, "attention_forward");
      !s.ok()) {
    return s;
  }
  absl::StatusOr<const void*> probs = operand(att, na, inputs, (*slots)[1], stream);
  if (!probs.ok()) return probs.status();
  for (int b = 0; b < B; b++) {
    const size_t v = static_cast<size_t>(b) * T * ld + 2 * C;
    float* y = out + static_cast<size_t>(b) * T * C;
    // y[t, i] = sum_s att[t, s] v[s, i]: y^T (i, t) = v^T (i, s) att^T (s, t).
    if (absl::Status s = gemm_heads(h, inputs, CUBLAS_OP_N, CUBLAS_OP_N, hs, T, T, ops.at(*x, v),
                                    ld, hs, ops.at(*probs, b * NH * TT), T, TT, 0.0f, y, C, hs, NH,
                                    "attention_forward att v");
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status attention_backward(const Cublas& blas, float* dinp, float* datt, const float* dout,
                                const float* inp, const float* att, int B, int T, int C, int NH,
                                cudaStream_t stream) {
  if (B == 0 || T == 0 || C == 0) return absl::OkStatus();
  const int hs = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const int ld = 3 * C;
  const long long TT = static_cast<long long>(T) * T;
  const size_t nx = static_cast<size_t>(B) * T * ld, ny = static_cast<size_t>(B) * T * C;
  const size_t na = static_cast<size_t>(B) * NH * TT;
  const GemmInputs inputs = blas.inputs();
  const Operands ops{inputs};
  cublasHandle_t h = blas.handle();
  if (absl::Status s =
          detail::cublas_status(detail::cublas().set_stream(h, stream), "cublasSetStream");
      !s.ok()) {
    return s;
  }
  // qkv's and dout's operands, and one slot for att's and then dpreatt's (stream-ordered reuse).
  absl::StatusOr<std::vector<void*>> slots = operand_slots(blas, {nx, ny, na}, stream);
  if (!slots.ok()) return slots.status();
  absl::StatusOr<const void*> x = operand(inp, nx, inputs, (*slots)[0], stream);
  if (!x.ok()) return x.status();
  absl::StatusOr<const void*> dy = operand(dout, ny, inputs, (*slots)[1], stream);
  if (!dy.ok()) return dy.status();
  for (int b = 0; b < B; b++) {
    const size_t v = static_cast<size_t>(b) * T * ld + 2 * C, y = static_cast<size_t>(b) * T * C;
    // datt[t, s] = dy_t . v_s: as the forward's scores with (q, k) -> (dy, v).
    if (absl::Status s = gemm_heads(h, inputs, CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs, ops.at(*x, v),
                                    ld, hs, ops.at(*dy, y), C, hs, 0.0f, datt + b * NH * TT, T, TT,
                                    NH, "attention_backward datt");
        !s.ok()) {
      return s;
    }
  }
  // datt becomes dpreatt, in place.
  const size_t rows = static_cast<size_t>(B) * NH * T;
  if (absl::Status s = launch_softmax(datt, att, rows, T, scale, stream, "attention_backward");
      !s.ok()) {
    return s;
  }
  absl::StatusOr<const void*> probs = operand(att, na, inputs, (*slots)[2], stream);
  if (!probs.ok()) return probs.status();
  for (int b = 0; b < B; b++) {
    const size_t y = static_cast<size_t>(b) * T * C;
    float* dv = dinp + static_cast<size_t>(b) * T * ld + 2 * C;
    // dv[s, i] += sum_t att[t, s] dy[t, i]: dv^T (i, s) += dy^T (i, t) (att^T)^T (t, s).
    if (absl::Status s = gemm_heads(h, inputs, CUBLAS_OP_N, CUBLAS_OP_T, hs, T, T, ops.at(*dy, y),
                                    C, hs, ops.at(*probs, b * NH * TT), T, TT, 1.0f, dv, ld, hs, NH,
                                    "attention_backward dv");
        !s.ok()) {
      return s;
    }
  }
  absl::StatusOr<const void*> dpre = operand(datt, na, inputs, (*slots)[2], stream);
  if (!dpre.ok()) return dpre.status();
  for (int b = 0; b < B; b++) {
    const size_t q = static_cast<size_t>(b) * T * ld, k = q + C;
    const void* dpre_b = ops.at(*dpre, b * NH * TT);
    float* dq = dinp + q;
    float* dk = dq + C;
    // dq[t, i] += sum_s dpre[t, s] k[s, i]: dq^T (i, t) += k^T (i, s) dpre^T (s, t).
    if (absl::Status s =
            gemm_heads(h, inputs, CUBLAS_OP_N, CUBLAS_OP_N, hs, T, T, ops.at(*x, k), ld, hs, dpre_b,
                       T, TT, 1.0f, dq, ld, hs, NH, "attention_backward dq");
        !s.ok()) {
      return s;
    }
    // dk[s, i] += sum_t dpre[t, s] q[t, i]: dk^T (i, s) += q^T (i, t) (dpre^T)^T (t, s).
    if (absl::Status s =
            gemm_heads(h, inputs, CUBLAS_OP_N, CUBLAS_OP_T, hs, T, T, ops.at(*x, q), ld, hs, dpre_b,
                       T, TT, 1.0f, dk, ld, hs, NH, "attention_backward dk");
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace troupe::nn::cuda
