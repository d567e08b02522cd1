// Single-precision matrix multiply on the CPU, row-major, over OpenBLAS.
#pragma once

#include <string>

namespace troupe::nn {

// C = alpha * op(A) * op(B) + beta * C, all row-major, where op(A) is M x K and
// op(B) is K x N, C is M x N:
//   A is M x K with row stride lda >= K, or K x M with lda >= M if trans_a;
//   B is K x N with row stride ldb >= N, or N x K with ldb >= K if trans_b;
//   C has row stride ldc >= N.
// When beta == 0, C is only written (NaNs in it do not propagate); K == 0
// gives C = beta * C. Runs on num_threads() threads (threads.h); safe to call
// from several threads at once. For a fixed thread count the result is the
// same bits on every run.
//
// llm.c's matmul_forward (out = inp W^T + bias, inp B*T x C, W OC x C) is
//   gemm(false, true, B*T, OC, C, 1, inp, C, weight, C, 0, out, OC);
// its dinp += dout W and dweight += dout^T inp are
//   gemm(false, false, B*T, C, OC, 1, dout, OC, weight, C, 1, dinp, C);
//   gemm(true, false, OC, C, B*T, 1, dout, OC, inp, C, 1, dweight, C);
//
// REQUIRES: M, N, K >= 0, the strides as above, no overlap of C with A or B.
// A violation aborts with a message naming the shapes.
void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
          const float* B, int ldb, float beta, float* C, int ldc);

// Whether gemm() called inside an OpenMP parallel region runs on the calling thread alone, so that
// each thread of a region can compute its own part of a product: true with OpenBLAS's OpenMP
// build (libopenblas0-openmp, which troupe_nn links where it is installed), false with the
// pthreads or serial builds.
bool gemm_runs_on_caller_in_parallel();

// The BLAS behind gemm(), for logs: e.g. "OpenBLAS 0.3.21 (SkylakeX kernels, OpenMP)".
std::string gemm_backend();

// Empty, or why gemm() runs far below what this CPU can do and how to fix
// it. OpenBLAS picks its kernels for the CPU model when it loads; one older
// than the CPU (Debian 12's 0.3.21 on a 4th or 5th generation Xeon) falls
// back to its SSE3 "Prescott" kernels, about 6x slower than the AVX-512
// ones, unless OPENBLAS_CORETYPE names a core it knows (SkylakeX, Haswell)
// in the process's environment at start-up. gemm() prints this once to
// stderr.
std::string gemm_backend_warning();

}  // namespace troupe::nn
