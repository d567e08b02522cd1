// Layer normalisation over the channels of each position, forward and backward.
// Shapes: B = batch size, T = sequence length, C = channels.
#pragma once

namespace troupe::nn {

// Epsilon inside the square root, as GPT-2 and torch.nn.LayerNorm.
inline constexpr float kLayerNormEps = 1e-5f;

// out[B, T, C] = (inp - mean) * rstd * weight + bias, per position over its C channels.
// mean [B, T] and rstd [B, T] (1 / sqrt(var + eps), biased variance) are saved for backward.
// weight [C], bias [C].
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int B, int T, int C);

// Accumulates into dinp [B, T, C], dweight [C], dbias [C] from dout [B, T, C] and what the
// forward saved. Deterministic for a fixed OpenMP thread count. With accumulate_dinp = false,
// dinp = instead of += (dweight and dbias always accumulate).
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        int B, int T, int C, bool accumulate_dinp = true);

}  // namespace troupe::nn
