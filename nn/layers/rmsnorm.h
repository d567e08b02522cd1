// Root-mean-square normalisation over the channels of each position (Llama's RMSNorm), forward
// and backward. Shapes: B = batch size, T = sequence length, C = channels.
#pragma once

namespace troupe::nn {

// out[B, T, C] = inp * rstd * weight, per position over its C channels, with
// rstd = 1 / sqrt(mean(inp^2) + eps) saved in rstd [B, T] for backward. weight [C]. In Hugging
// Face's order: the normalised value is rounded to fp32 before the weight multiplies it.
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int B, int T,
                     int C, float eps);

// Accumulates into dinp [B, T, C] and dweight [C] from dout [B, T, C] and what the forward saved.
// Deterministic for a fixed OpenMP thread count. With accumulate_dinp = false, dinp = instead of
// += (dweight always accumulates).
void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                      const float* weight, const float* rstd, int B, int T, int C,
                      bool accumulate_dinp = true);

}  // namespace troupe::nn
