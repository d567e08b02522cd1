// Embedding-table backward pieces shared by encoder.cc and the vocab-parallel embedding.
// Shapes: B = batch size, T = sequence length, C = channels.
#pragma once

#include <cstddef>
#include <cstdint>

namespace troupe::nn::detail {

// dtable[ids[i] - v0, :] += dout[i, :] for each of the n rows whose id is in [v0, v1); others are
// skipped. Parallel over channel slices, rows in order: deterministic for any thread count.
void embedding_rows_backward(float* dtable, const float* dout, const int32_t* ids, size_t n, int v0,
                             int v1, int C);

// dwpe[t, :] += sum over b (in order) of dout[b, t, :]. Parallel over t.
void position_backward(float* dwpe, const float* dout, int B, int T, int C);

}  // namespace troupe::nn::detail
