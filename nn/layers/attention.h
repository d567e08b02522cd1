// Causal multi-head self-attention from a fused qkv input, forward and backward.
// Shapes: B = batch size, T = sequence length, C = channels, NH = heads, hs = C / NH.
#pragma once

namespace troupe::nn {

// inp [B, T, 3C]: for each position q, k and v side by side (C channels each); head h uses
//   channels [h*hs, (h+1)*hs) of each.
// att [B, NH, T, T]: softmax(q k^T / sqrt(hs)) under the causal mask, saved for backward;
//   entries above the diagonal (t2 > t) are written as 0.
// out [B, T, C]: att @ v of each head, heads side by side.
// Work above the diagonal is skipped (to a 4 x 16 tile's granularity).
// REQUIRES: C % NH == 0.
void attention_forward(float* out, float* att, const float* inp, int B, int T, int C, int NH);

// Accumulates into dinp [B, T, 3C] (dq, dk, dv) from dout [B, T, C], the forward's inp and att.
// Parallel over the B*NH (b, head) pairs, each of which owns its slice of dinp: no races, and the
// same bits for any thread count. Allocates T*T + hs*T floats of scratch per thread.
void attention_backward(float* dinp, const float* dout, const float* inp, const float* att, int B,
                        int T, int C, int NH);

// The same attention without the probabilities (flash-attention style): the forward keeps, per
// row, lse [B, NH, T] = the log-sum-exp of the scaled scores, and the backward recomputes the
// probabilities from it, one block of 32 query rows at a time (nn/layers/flash_attention.cc).
// out is the forward's output, which the backward reads again. Parallel over the B*NH pairs, each
// of which owns its slice of out, lse and dinp: the same bits for any thread count. On AVX-512
// CPUs the products run 16 wide with fused multiply-adds (elsewhere 8 wide, as the other layers),
// so results differ in the last bits between CPU types. Scratch per thread: about
// 6 T hs + 2 (32 T) floats for the backward, half that for the forward. The backward accumulates
// into dinp, or with accumulate = false writes it (its old contents are not read).
void flash_attention_forward(float* out, float* lse, const float* inp, int B, int T, int C, int NH);
void flash_attention_backward(float* dinp, const float* dout, const float* inp, const float* out,
                              const float* lse, int B, int T, int C, int NH,
                              bool accumulate = true);

}  // namespace troupe::nn
