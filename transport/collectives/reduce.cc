#include "transport/collectives/reduce.h"

#include <algorithm>
#include <cstdint>

namespace troupe::transport {
namespace {

// 16-bit types are processed kBlock elements at a time through fp32 scratch
// (2 x 4 KiB, in L1), so that the arithmetic runs over plain float arrays
// that GCC vectorises; reduce_many blocks fp32 too, to keep dst's block in
// cache while every source is applied to it.
constexpr size_t kBlock = 1024;

struct Sum {
  static float apply(float a, float b) { return a + b; }
};
// NaN-propagating: a NaN in either operand gives a NaN; on a tie, b.
struct Max {
  static float apply(float a, float b) { return (a > b || a != a) ? a : b; }
};
struct Min {
  static float apply(float a, float b) { return (a < b || a != a) ? a : b; }
};

struct Half {
  static float widen(uint16_t v) { return half_to_float(v); }
  static uint16_t narrow(float v) { return float_to_half(v); }
};
struct BFloat16 {
  static float widen(uint16_t v) { return bf16_to_float(v); }
  static uint16_t narrow(float v) { return float_to_bf16(v); }
};

// The loops below are written over restrict pointers with no calls in them
// so that -O3 vectorises them (checked with -fopt-info-vec): combine and
// multiply for every op and type, and widen/narrow for bf16. widen/narrow
// for fp16 stay scalar (the conversions' float adds may trap), which makes
// fp16 reductions about 10x slower than fp32 ones.
template <class Op>
void combine(float* __restrict dst, const float* __restrict src, size_t n) {
  for (size_t i = 0; i < n; ++i)
    dst[i] = Op::apply(dst[i], src[i]);
}

void multiply(float* __restrict data, size_t n, float factor) {
  for (size_t i = 0; i < n; ++i)
    data[i] *= factor;
}

template <class T>
void widen(const uint16_t* __restrict in, float* __restrict out, size_t n) {
  for (size_t i = 0; i < n; ++i)
    out[i] = T::widen(in[i]);
}

template <class T>
void narrow(const float* __restrict in, uint16_t* __restrict out, size_t n) {
  for (size_t i = 0; i < n; ++i)
    out[i] = T::narrow(in[i]);
}

template <class Op>
void reduce_many_f32(float* dst, const void* const* srcs, size_t nsrcs, size_t count) {
  for (size_t begin = 0; begin < count; begin += kBlock) {
    const size_t n = std::min(kBlock, count - begin);
    for (size_t s = 0; s < nsrcs; ++s) {
      combine<Op>(dst + begin, static_cast<const float*>(srcs[s]) + begin, n);
    }
  }
}

// reduce_into for a 16-bit type is reduce_many with one source: one rounding.
template <class T, class Op>
void reduce_many_16(uint16_t* dst, const void* const* srcs, size_t nsrcs, size_t count) {
  float acc[kBlock];
  float operand[kBlock];
  for (size_t begin = 0; begin < count; begin += kBlock) {
    const size_t n = std::min(kBlock, count - begin);
    widen<T>(dst + begin, acc, n);
    for (size_t s = 0; s < nsrcs; ++s) {
      widen<T>(static_cast<const uint16_t*>(srcs[s]) + begin, operand, n);
      combine<Op>(acc, operand, n);
    }
    narrow<T>(acc, dst + begin, n);
  }
}

template <class Op>
void reduce_many_typed(DType type, void* dst, const void* const* srcs, size_t nsrcs, size_t count) {
  switch (type) {
    case DType::kFloat32:
      return reduce_many_f32<Op>(static_cast<float*>(dst), srcs, nsrcs, count);
    case DType::kFloat16:
      return reduce_many_16<Half, Op>(static_cast<uint16_t*>(dst), srcs, nsrcs, count);
    case DType::kBFloat16:
      return reduce_many_16<BFloat16, Op>(static_cast<uint16_t*>(dst), srcs, nsrcs, count);
  }
}

template <class T>
void scale_16(uint16_t* data, size_t count, float factor) {
  float block[kBlock];
  for (size_t begin = 0; begin < count; begin += kBlock) {
    const size_t n = std::min(kBlock, count - begin);
    widen<T>(data + begin, block, n);
    multiply(block, n, factor);
    narrow<T>(block, data + begin, n);
  }
}

}  // namespace

std::string_view to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAvg:
      return "avg";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kMin:
      return "min";
  }
  return "unknown";
}

void reduce_many(DType type, ReduceOp op, void* dst, const void* const* srcs, size_t nsrcs,
                 size_t count) {
  if (count == 0 || nsrcs == 0) return;
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:  // a sum until scale() divides it
      return reduce_many_typed<Sum>(type, dst, srcs, nsrcs, count);
    case ReduceOp::kMax:
      return reduce_many_typed<Max>(type, dst, srcs, nsrcs, count);
    case ReduceOp::kMin:
      return reduce_many_typed<Min>(type, dst, srcs, nsrcs, count);
  }
}

void reduce_into(DType type, ReduceOp op, void* dst, const void* src, size_t count) {
  reduce_many(type, op, dst, &src, 1, count);
}

void scale(DType type, void* data, size_t count, float factor) {
  switch (type) {
    case DType::kFloat32:
      return multiply(static_cast<float*>(data), count, factor);
    case DType::kFloat16:
      return scale_16<Half>(static_cast<uint16_t*>(data), count, factor);
    case DType::kBFloat16:
      return scale_16<BFloat16>(static_cast<uint16_t*>(data), count, factor);
  }
}

}  // namespace troupe::transport
