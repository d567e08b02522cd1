// fp32 master weights with 16-bit compute copies (mixed precision).
//
// A ParamShardActor keeps its parameters in fp32 and hands the compute
// stages a bf16 or fp16 copy, refreshed after each applied update with
// copy_to_half. The stages' 16-bit gradients come back to fp32 through
// grads_to_float, unscaled on the way (fp16 with a DynamicLossScaler: pass
// multiplier = 1 / scale) and checked for overflow in the same pass.
// 16-bit values are raw IEEE fp16 or bf16 bit patterns in uint16_t; the
// conversions are nn/dtype.h's (round to nearest even, exact widening).
#pragma once

#include <cstddef>
#include <cstdint>

#include "nn/dtype.h"

namespace troupe::nn {

// dst[i] = master[i] rounded to nearest (ties to even) in `type`, over
// [0, n): float_to_bf16 / float_to_half of nn/dtype.h, vectorised. Beyond
// the type's range the result is +-inf (fp16: |x| >= 65520; bf16 has fp32's
// range); fp16 subnormals are kept; NaN stays NaN.
// REQUIRES: type is kBFloat16 or kFloat16; the buffers do not overlap.
void copy_to_half(uint16_t* dst, const float* master, size_t n, DType type);

// dst[i] = float(src[i]) * multiplier over [0, n): the widening is exact,
// the multiply rounds once. Returns true iff every dst[i] is finite; false
// means a gradient overflowed (or already was inf/nan), and in fp16 training
// the step must be skipped.
// REQUIRES: type is kBFloat16 or kFloat16; the buffers do not overlap.
[[nodiscard]] bool grads_to_float(float* dst, const uint16_t* src, size_t n, DType type,
                                  float multiplier = 1.0f);

}  // namespace troupe::nn
