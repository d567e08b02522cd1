// GELU with GPT-2's tanh approximation, forward and backward, elementwise over N values:
//   gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
#pragma once

#include <cstddef>

namespace troupe::nn {

// out[N] = gelu(inp[N]). out may alias inp.
void gelu_forward(float* out, const float* inp, size_t N);

// dinp[N] += gelu'(inp) * dout (with accumulate = false: dinp = ...).
void gelu_backward(float* dinp, const float* dout, const float* inp, size_t N,
                   bool accumulate = true);

}  // namespace troupe::nn
