// Element types of nn tensors, and exact conversions between fp32 and the
// 16-bit formats used for mixed precision.
//
//   kFloat32   IEEE binary32
//   kFloat16   IEEE binary16: 1 sign, 5 exponent, 10 mantissa bits
//   kBFloat16  bfloat16: the top 16 bits of a binary32 (8 exponent, 7 mantissa)
//
// Widening to fp32 is exact. Narrowing from fp32 rounds to nearest, ties to
// even; a finite value past the largest finite 16-bit value becomes inf, fp16
// subnormals are produced and read exactly. A NaN stays a NaN of the same sign
// in every direction, and comes out quiet (the top of its payload is kept).
// The results do not depend on the FP environment, except that the default
// rounding mode must be in force and flush-to-zero off (no -ffast-math).
//
// transport/collectives/dtype.h holds the same conversions: transport and nn
// are both floors of the layering (docs/design.md, "Layers") and may not include each
// other, so each keeps its own copy. The one difference: here widening a
// signalling NaN quiets it, as F16C does, so that the vector and portable
// paths agree bit for bit.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>

namespace troupe::nn {

// The same names and values as transport::DType (each floor of the layering
// defines its own: docs/design.md, "Layers").
enum class DType : uint8_t { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2 };

// Bytes per element: 4 or 2.
size_t element_size(DType type);
const char* to_string(DType type);  // "float32", "float16", "bfloat16"

inline float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = h & 0x7c00u;
  // Exponent and mantissa moved into place and rebiased from 15 to 127.
  uint32_t bits =
      (static_cast<uint32_t>(h & 0x7fffu) << 13) + (static_cast<uint32_t>(127 - 15) << 23);
  // inf or NaN: exponent 255, the payload kept; a NaN gets the quiet bit.
  const uint32_t quiet = (h & 0x3ffu) != 0 ? 0x00400000u : 0u;
  bits = exponent == 0x7c00u ? (bits + (static_cast<uint32_t>(128 - 16) << 23)) | quiet : bits;
  // Zero or subnormal (mantissa x 2^-24): read as 1.mantissa x 2^-14, less 2^-14.
  const float subnormal = std::bit_cast<float>(bits + (1u << 23)) - 0x1p-14f;
  bits = exponent == 0 ? std::bit_cast<uint32_t>(subnormal) : bits;
  return std::bit_cast<float>(sign | bits);
}

inline uint16_t float_to_half(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const uint32_t magnitude = bits & 0x7fffffffu;
  // Normal: rebias, round to nearest even at bit 13; a carry out of the
  // mantissa moves into the exponent.
  const uint32_t odd = (magnitude >> 13) & 1u;
  uint32_t half = (magnitude - (static_cast<uint32_t>(127 - 15) << 23) + 0xfffu + odd) >> 13;
  // Below 2^-14 (half subnormal or zero): adding 0.5 puts the fp32 ulp at
  // 2^-24, the half subnormal ulp, so the FPU's round-to-nearest-even rounds;
  // the low bits are then the half's (0x400, the smallest normal, on carry).
  const float shifted = std::bit_cast<float>(magnitude) + 0.5f;
  const uint32_t subnormal = std::bit_cast<uint32_t>(shifted) - std::bit_cast<uint32_t>(0.5f);
  half = magnitude < 0x38800000u ? subnormal : half;
  // 65520, halfway between 65504 (odd mantissa) and 65536, and above: inf.
  half = magnitude >= 0x477ff000u ? 0x7c00u : half;
  half = magnitude > 0x7f800000u ? 0x7e00u | ((magnitude >> 13) & 0x3ffu) : half;  // NaN
  return static_cast<uint16_t>(sign | half);
}

inline float bf16_to_float(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  return std::bit_cast<float>((bits & 0x7fffffffu) > 0x7f800000u ? bits | 0x00400000u : bits);
}

inline uint16_t float_to_bf16(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {  // NaN: truncate, and set the quiet bit
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  }
  // A carry out of the mantissa moves into the exponent, so the largest
  // finite values round to inf.
  const uint32_t odd = (bits >> 16) & 1u;
  return static_cast<uint16_t>((bits + 0x7fffu + odd) >> 16);
}

// dst[i] = src[i] converted from src_type to dst_type, for i in [0, n), on
// the calling thread (kernels.h has the multithreaded to_float/from_float).
// 16-bit to 16-bit goes through fp32 (one rounding); the same type copies.
// Vectorised with AVX2 and F16C when the CPU has them, else portable: both
// give the same bits. Pointers need only their element's alignment.
// REQUIRES: n >= 0; src and dst do not overlap.
void convert(const void* src, DType src_type, void* dst, DType dst_type, int64_t n);

namespace detail {
// The two paths of convert(), for tests and benchmarks.
// True if this CPU has AVX2 and F16C (and this build can use them).
bool has_avx2_f16c();
void convert_portable(const void* src, DType src_type, void* dst, DType dst_type, int64_t n);
// REQUIRES: has_avx2_f16c().
void convert_avx2(const void* src, DType src_type, void* dst, DType dst_type, int64_t n);
}  // namespace detail

}  // namespace troupe::nn
