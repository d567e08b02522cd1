// Fully connected layer (llm.c's matmul): a GEMM plus bias, forward and backward.
// Shapes: B = batch size, T = sequence length, C = input channels, OC = output channels.
#pragma once

namespace troupe::nn {

// out[B*T, OC] = inp[B*T, C] @ weight[OC, C]^T + bias[OC]. bias may be null (no bias).
void linear_forward(float* out, const float* inp, const float* weight, const float* bias, int B,
                    int T, int C, int OC);

// Accumulates:
//   dinp[B*T, C]    += dout[B*T, OC] @ weight[OC, C]      (skipped when dinp is null)
//   dweight[OC, C]  += dout^T @ inp
//   dbias[OC]       += sum over rows of dout               (skipped when dbias is null)
// Deterministic for a fixed thread count (OpenBLAS and OpenMP). With accumulate_dinp = false,
// dinp = dout @ weight (its old contents are not read); dweight and dbias always accumulate.
void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int B, int T, int C, int OC, bool accumulate_dinp = true);

}  // namespace troupe::nn
