// The SwiGLU gate of Llama's MLP, forward and backward: silu(gate) * up, elementwise.
// Shapes: B = batch size, T = sequence length, I = the MLP's width (gate and up each).
#pragma once

namespace troupe::nn {

// out[B, T, I] = silu(gu[b, t, :I]) * gu[b, t, I:], silu(x) = x / (1 + exp(-x)).
// gu [B, T, 2I]: each position's gate projection then its up projection (one GEMM's output).
void swiglu_forward(float* out, const float* gu, int B, int T, int I);

// dgu [B, T, 2I] = the gradient of the gate and up halves from dout [B, T, I] (written, not
// accumulated: its old contents are not read).
void swiglu_backward(float* dgu, const float* dout, const float* gu, int B, int T, int I);

}  // namespace troupe::nn
