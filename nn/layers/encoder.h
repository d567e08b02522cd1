// Token + position embedding (GPT-2's wte + wpe), forward and backward.
// Shapes: B = batch size, T = sequence length, C = channels, V = vocabulary rows of wte.
#pragma once

#include <cstdint>

namespace troupe::nn {

// out[B, T, C] = wte[inp[b, t], :] + wpe[t, :].
// inp [B, T] token ids; wte [V, C]; wpe [maxT, C] with maxT >= T.
// REQUIRES: 0 <= inp[i] < V for every i (not checked).
void encoder_forward(float* out, const int32_t* inp, const float* wte, const float* wpe, int B,
                     int T, int C);

// dwte[inp[b, t], :] += dout[b, t, :]; dwpe[t, :] += sum over b of dout[b, t, :].
// Accumulates (callers zero gradients once per step). Deterministic and race-free: rows of dwte
// that repeat in inp are summed in (b, t) order.
void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* inp, int B, int T,
                      int C);

}  // namespace troupe::nn
