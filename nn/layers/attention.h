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

}  // namespace troupe::nn
