// Elementwise and reduction kernels on raw fp32 arrays, in the style of
// llm.c: pointers and an element count, the output first.
//
// All run on num_threads() threads (threads.h) once an array is large enough
// to repay it, each thread taking one contiguous range (a static schedule),
// and are vectorised (AVX2 where the CPU has it, chosen at load time; SSE2
// otherwise). Arithmetic is plain fp32 with no fused multiply-add, so every
// result is the same bits on every run, thread count and CPU.
//
// sum and sum_squares accumulate in fp32 in a fixed order that depends only
// on n: blocks of kSumBlock elements, each summed over 32 interleaved
// lanes that are then added pairwise, and the blocks' sums added pairwise.
// So their results do not depend on the thread count or on the pointer's
// alignment either, and their error grows about as log2(n), not n.
//
// Counts are in elements; n == 0 does nothing (sums return 0). Pointers need
// only float alignment. Outputs may be the very same array as an input (e.g.
// add(x, x, y, n)) but must not otherwise overlap one.
#pragma once

#include <cstdint>

#include "nn/dtype.h"

namespace troupe::nn {

// Elements per block of sum and sum_squares.
inline constexpr int64_t kSumBlock = 4096;

// out[i] = value
void fill(float* out, float value, int64_t n);
// out[i] = in[i]
void copy(float* out, const float* in, int64_t n);
// out[i] = a[i] + b[i]
void add(float* out, const float* a, const float* b, int64_t n);
// out[i] = a[i] * b[i]
void mul(float* out, const float* a, const float* b, int64_t n);
// y[i] = y[i] + alpha * x[i], rounded after the multiply and after the add
void axpy(float* y, float alpha, const float* x, int64_t n);
// x[i] = alpha * x[i]
void scale(float* x, float alpha, int64_t n);

// x[0] + ... + x[n-1], in the blocked order above.
float sum(const float* x, int64_t n);
// x[0]^2 + ... + x[n-1]^2, in the same order (the square of a gradient's L2 norm).
float sum_squares(const float* x, int64_t n);

// Mixed precision: out[i] = in[i] converted exactly (dtype.h), in parallel.
// REQUIRES: type is kBFloat16 or kFloat16.
void to_float(float* out, const uint16_t* in, DType type, int64_t n);
// out[i] = in[i] rounded to nearest even in `type` (dtype.h), in parallel.
// REQUIRES: type is kBFloat16 or kFloat16.
void from_float(uint16_t* out, DType type, const float* in, int64_t n);

}  // namespace troupe::nn
