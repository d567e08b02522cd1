// Layers for incremental decoding (nn/model/decoder.h): attention of a few new positions over a
// key/value cache, and a linear layer for a few rows that splits its output channels, not its
// rows, across the threads (one row of a GEMM leaves all but one thread idle).
// Shapes: B = rows (sequences), T = new positions per row, NH = query heads, KV = key/value heads
// (NH % KV == 0; query head h reads KV head h / (NH / KV)), hd = head size, cap = the cache's
// positions per row and head.
#pragma once

namespace troupe::nn {

// out[B, T, NH hd] = causal attention of the queries q (row (b, t) at q + (b T + t) ldq, head h's
// hd channels at h hd) over the cache: query t of row b sits at position p0 + t and attends to
// positions [0, p0 + t] of k and v [B, KV, cap, hd], softmax(q k^T / sqrt(hd)) v, which REQUIRES
// those positions written. Parallel over the (b, t, h) triples; the same bits for any thread
// count.
void decode_attention_forward(float* out, const float* q, int ldq, const float* k, const float* v,
                              int B, int T, int p0, int NH, int KV, int hd, int cap);

// out[n, OC] = inp[n, C] @ weight[OC, C]^T + bias[OC] (bias may be null), as linear_forward
// (linear.h) with B*T = n. For n <= kFewRows each output is one dot product over C, the output
// channels split across the threads (the weight read once per call, by every thread its rows);
// more rows go to linear_forward. The same bits for a fixed thread count.
inline constexpr int kFewRows = 4;
void decode_linear_forward(float* out, const float* inp, const float* weight, const float* bias,
                           int n, int C, int OC);

// cache[b, h, p0 + t, 0:hd) = src[(b T + t) ld + h head_stride, hd floats) for every row b < B,
// new position t < T and head h < heads: new keys or values into a cache [B, heads, cap, hd].
void decode_cache_write(float* cache, const float* src, int ld, int head_stride, int B, int T,
                        int p0, int heads, int hd, int cap);

}  // namespace troupe::nn
