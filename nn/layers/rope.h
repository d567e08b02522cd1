// Rotary position embeddings (RoFormer) in Hugging Face's rotate-half layout, applied where the
// q/k/v projection meets causal attention: the projection's output for NH query heads and KV
// key/value heads (grouped-query attention) becomes the packed input of flash_attention_forward
// (attention.h), every query head beside its own copy of its group's key and value.
// Shapes: B = batch size, T = sequence length, NH = query heads, KV = key/value heads
// (NH % KV == 0; query head h uses KV head h / (NH / KV)), hd = head size (even),
// maxT = the longest sequence.
#pragma once

namespace troupe::nn {

// The angles' table: cos[t, i] = cos(t * inv_freq[i]), sin likewise, for t < maxT and i < hd/2,
// inv_freq[i] = 1 / theta^(2i / hd), all in fp32 as Hugging Face's LlamaRotaryEmbedding
// computes them. cos and sin are [maxT, hd/2] (both halves of a head use the same angles).
void rope_table(float* cos, float* sin, int maxT, int hd, double theta);

// out[B, T, 3 NH hd] (q, k, v, as attention.h's packed inp with C = NH hd) from
// qkv[B, T, (NH + 2 KV) hd] (q's NH heads, k's KV heads, v's KV heads): q and k rotated by the
// angles of position t, x * cos + rotate_half(x) * sin with rotate_half(x) = cat(-x2, x1) over a
// head's halves x1, x2; each query head's k and v are its KV head's.
void rope_qkv_forward(float* out, const float* qkv, const float* cos, const float* sin, int B,
                      int T, int NH, int KV, int hd);

// dqkv[B, T, (NH + 2 KV) hd] = the gradient of qkv from dout [B, T, 3 NH hd] (written, not
// accumulated): each KV head's the sum over its group's query heads, in head order, rotated back.
// Deterministic for any thread count.
void rope_qkv_backward(float* dqkv, const float* dout, const float* cos, const float* sin, int B,
                       int T, int NH, int KV, int hd);

}  // namespace troupe::nn
