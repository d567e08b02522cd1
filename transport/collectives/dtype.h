// Element types of the tensors that collectives reduce, and exact bit-level
// conversions between the 16-bit formats and fp32.
//
//   kFloat32   IEEE binary32
//   kFloat16   IEEE binary16: 1 sign, 5 exponent, 10 mantissa bits
//   kBFloat16  bfloat16: the top 16 bits of a binary32 (8 exponent, 7 mantissa)
//
// Conversions to fp32 are exact. Conversions from fp32 round to nearest, ties
// to even; a finite value past the largest finite 16-bit value rounds to inf
// (as IEEE requires), fp16 subnormals are produced and read exactly, and a NaN
// stays a NaN of the same sign (made quiet; the payload is kept where it fits).
// The functions are inline so that the reduction kernels can convert a block
// at a time without a call per element; they do not depend on the FP
// environment except for the default rounding mode (round to nearest).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace troupe::transport {

// The same names and values as nn::DType (each floor of the layering defines its own).
enum class DType : uint8_t { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2 };

// Bytes per element: 4 or 2.
size_t element_size(DType type);
std::string_view to_string(DType type);  // "float32", "float16", "bfloat16"

// The fp16 conversions are written as selects rather than branches. (GCC 12
// still keeps them scalar under the default -ftrapping-math, since the
// subnormal path's float add may trap; see the note in reduce.cc.)
inline float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = h & 0x7c00u;
  // Exponent and mantissa moved into place and rebiased from 15 to 127.
  uint32_t bits =
      (static_cast<uint32_t>(h & 0x7fffu) << 13) + (static_cast<uint32_t>(127 - 15) << 23);
  // inf or NaN: the exponent goes to 255; the mantissa (payload) is unchanged.
  bits = exponent == 0x7c00u ? bits + (static_cast<uint32_t>(128 - 16) << 23) : bits;
  // Zero or subnormal (mantissa x 2^-24): read as 1.mantissa x 2^-14, less 2^-14.
  const float subnormal = std::bit_cast<float>(bits + (1u << 23)) - 0x1p-14f;
  bits = exponent == 0 ? std::bit_cast<uint32_t>(subnormal) : bits;
  return std::bit_cast<float>(sign | bits);
}

inline uint16_t float_to_half(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const uint32_t magnitude = bits & 0x7fffffffu;
  // Normal: rebias, round to nearest even at bit 13, and let a carry out of
  // the mantissa move into the exponent.
  const uint32_t odd = (magnitude >> 13) & 1u;
  uint32_t half = (magnitude - (static_cast<uint32_t>(127 - 15) << 23) + 0xfffu + odd) >> 13;
  // Below 2^-14, a half subnormal (or zero): adding 0.5 puts the fp32 ulp at
  // 2^-24, the half subnormal ulp, so the FPU's round-to-nearest-even does the
  // rounding; the low mantissa bits are then the half's (0x400, the smallest
  // normal, on carry-out).
  const float shifted = std::bit_cast<float>(magnitude) + 0.5f;
  const uint32_t subnormal = std::bit_cast<uint32_t>(shifted) - std::bit_cast<uint32_t>(0.5f);
  half = magnitude < 0x38800000u ? subnormal : half;
  // 65520 lies halfway between 65504 (the largest half, odd mantissa) and
  // 65536: ties to even round it, and everything above, to inf.
  half = magnitude >= 0x477ff000u ? 0x7c00u : half;
  // NaN: keep it quiet and the top of the payload.
  half = magnitude > 0x7f800000u ? 0x7e00u | ((magnitude >> 13) & 0x3ffu) : half;
  return static_cast<uint16_t>(sign | half);
}

inline float bf16_to_float(uint16_t b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

inline uint16_t float_to_bf16(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {  // NaN: truncate, and set the quiet bit
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  }
  // A carry out of the mantissa moves into the exponent, so the largest
  // finite values round to inf correctly.
  const uint32_t odd = (bits >> 16) & 1u;
  return static_cast<uint16_t>((bits + 0x7fffu + odd) >> 16);
}

}  // namespace troupe::transport
