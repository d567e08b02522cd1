// Residual connection: out = inp1 + inp2, elementwise over N values, forward and backward.
#pragma once

#include <cstddef>

namespace troupe::nn {

// out[N] = inp1[N] + inp2[N]. out may alias either input.
void residual_forward(float* out, const float* inp1, const float* inp2, size_t N);

// dinp1[N] += dout; dinp2[N] += dout. Either gradient may be null (skipped).
void residual_backward(float* dinp1, float* dinp2, const float* dout, size_t N);

}  // namespace troupe::nn
