#include "transport/collectives/reduce.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#define TROUPE_REDUCE_HAVE_AVX2 1
// Functions that use AVX2 and F16C, called only once the CPU is known to
// have them. No FMA: a fused a * b + c rounds once where the portable code
// rounds twice.
#define TROUPE_AVX2 __attribute__((target("avx2,f16c")))
#else
#define TROUPE_REDUCE_HAVE_AVX2 0
#endif

namespace troupe::transport {
namespace {

// The portable kernels process 16-bit types kBlock elements at a time
// through fp32 scratch (2 x 4 KiB, in L1), so that the arithmetic runs over
// plain float arrays that GCC vectorises; reduce_many blocks fp32 too, to
// keep dst's block in cache while every source is applied to it. The AVX2
// kernels block reduce_many the same way.
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

// The portable kernels. The loops below are written over restrict pointers
// with no calls in them so that -O3 vectorises them (checked with
// -fopt-info-vec): combine and multiply for every op and type, and
// widen/narrow for bf16. widen/narrow for fp16 stay scalar (the conversions'
// float adds may trap), which makes these fp16 reductions about 10x slower
// than fp32 ones; the AVX2 kernels below convert in hardware instead.
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

#if TROUPE_REDUCE_HAVE_AVX2
// Kernels for CPUs with AVX2 and F16C, 16 elements at a time; the last
// count % 16 go through the scalar Op and conversions. Every lane gives the
// bits the portable kernels give (NaN payloads included, except which of two
// NaNs a sum returns, which is the hardware's in both):
//  - fp32 is loaded and stored as it is.
//  - F16C converts fp16 <-> fp32 exactly, subnormals included, and with the
//    rounding given in the instruction (to nearest even), not MXCSR's. It
//    quiets a signalling NaN when it widens, where half_to_float keeps it
//    signalling; but every 16-bit result is narrowed, and narrowing quiets a
//    NaN either way, keeping the same payload bits.
//  - bf16 <-> fp32 is the scalar integer code, lane by lane.
//  - max and min select with the scalar rule: a if it is a NaN, else b if it
//    is one, else the larger (smaller), and b on a tie.
namespace avx2 {

constexpr size_t kLanes = 16;

// 16 elements widened to fp32, in an order of the element type's choosing:
// the kernels combine lanes only position by position, and T::store puts
// each lane back where T::load took it from.
struct Lanes {
  __m256 lo;
  __m256 hi;
};

struct Float {
  using Elem = float;
  static float widen(float v) { return v; }
  static float narrow(float v) { return v; }
  TROUPE_AVX2 static Lanes load(const float* p) {
    return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)};
  }
  TROUPE_AVX2 static void store(float* p, Lanes v) {
    _mm256_storeu_ps(p, v.lo);
    _mm256_storeu_ps(p + 8, v.hi);
  }
};

struct Half : transport::Half {
  using Elem = uint16_t;
  TROUPE_AVX2 static Lanes load(const uint16_t* p) {
    return {_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))),
            _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8)))};
  }
  TROUPE_AVX2 static void store(uint16_t* p, Lanes v) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p),
                     _mm256_cvtps_ph(v.lo, _MM_FROUND_TO_NEAREST_INT));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p + 8),
                     _mm256_cvtps_ph(v.hi, _MM_FROUND_TO_NEAREST_INT));
  }
};

// Each 32-bit word of memory holds two bf16 elements: the even one (in its
// low half) goes to `lo`, the odd one (in its high half) to `hi`, which
// needs no shuffles either way.
struct BFloat16 : transport::BFloat16 {
  using Elem = uint16_t;
  TROUPE_AVX2 static Lanes load(const uint16_t* p) {
    const __m256i pairs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return {_mm256_castsi256_ps(_mm256_slli_epi32(pairs, 16)),
            _mm256_castsi256_ps(_mm256_and_si256(pairs, _mm256_set1_epi32(-65536)))};
  }
  TROUPE_AVX2 static void store(uint16_t* p, Lanes v) {
    const __m256i even = _mm256_srli_epi32(round(v.lo), 16);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm256_blend_epi16(even, round(v.hi), 0xaa));
  }
  // float_to_bf16 of each lane, in the lane's high 16 bits: add 0x7fff plus
  // the lowest bit kept, or for a NaN, set the quiet bit and add nothing.
  TROUPE_AVX2 static __m256i round(__m256 v) {
    const __m256i bits = _mm256_castps_si256(v);
    const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
    const __m256i increment =
        _mm256_andnot_si256(nan, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7fff)));
    const __m256i quiet = _mm256_and_si256(nan, _mm256_set1_epi32(0x00400000));
    return _mm256_add_epi32(_mm256_or_si256(bits, quiet), increment);
  }
};

// Op on each half of Lanes.
template <class Op>
TROUPE_AVX2 Lanes combine(Lanes a, Lanes b) {
  return {Op::apply(a.lo, b.lo), Op::apply(a.hi, b.hi)};
}

struct Sum : transport::Sum {
  using transport::Sum::apply;
  TROUPE_AVX2 static __m256 apply(__m256 a, __m256 b) { return _mm256_add_ps(a, b); }
};
// vmaxps/vminps give b when either operand is a NaN; a NaN in a is put back.
struct Max : transport::Max {
  using transport::Max::apply;
  TROUPE_AVX2 static __m256 apply(__m256 a, __m256 b) {
    return _mm256_blendv_ps(_mm256_max_ps(a, b), a, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
  }
};
struct Min : transport::Min {
  using transport::Min::apply;
  TROUPE_AVX2 static __m256 apply(__m256 a, __m256 b) {
    return _mm256_blendv_ps(_mm256_min_ps(a, b), a, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
  }
};

TROUPE_AVX2 inline Lanes load_acc(const float* p) {
  return {_mm256_load_ps(p), _mm256_load_ps(p + 8)};
}
TROUPE_AVX2 inline void store_acc(float* p, Lanes v) {
  _mm256_store_ps(p, v.lo);
  _mm256_store_ps(p + 8, v.hi);
}

// With one source, dst is combined and stored in one pass. With more, dst's
// block is widened into fp32 `acc` (in L1) with the first source, each
// further source is combined into it, and the last one's result is
// narrowed into dst: each buffer is read once, dst written once.
template <class T, class Op>
TROUPE_AVX2 void reduce_many(typename T::Elem* dst, const void* const* srcs, size_t nsrcs,
                             size_t count) {
  using Elem = typename T::Elem;
  const auto source = [srcs](size_t s) { return static_cast<const Elem*>(srcs[s]); };
  const size_t vector_count = count / kLanes * kLanes;
  alignas(32) float acc[kBlock];
  for (size_t begin = 0; begin < vector_count; begin += kBlock) {
    const size_t n = std::min(kBlock, vector_count - begin);  // a multiple of kLanes
    Elem* d = dst + begin;
    const Elem* first = source(0) + begin;
    if (nsrcs == 1) {
      for (size_t i = 0; i < n; i += kLanes)
        T::store(d + i, combine<Op>(T::load(d + i), T::load(first + i)));
      continue;
    }
    for (size_t i = 0; i < n; i += kLanes)
      store_acc(acc + i, combine<Op>(T::load(d + i), T::load(first + i)));
    for (size_t s = 1; s + 1 < nsrcs; ++s) {
      const Elem* src = source(s) + begin;
      for (size_t i = 0; i < n; i += kLanes)
        store_acc(acc + i, combine<Op>(load_acc(acc + i), T::load(src + i)));
    }
    const Elem* last = source(nsrcs - 1) + begin;
    for (size_t i = 0; i < n; i += kLanes)
      T::store(d + i, combine<Op>(load_acc(acc + i), T::load(last + i)));
  }
  for (size_t i = vector_count; i < count; ++i) {
    float a = T::widen(dst[i]);
    for (size_t s = 0; s < nsrcs; ++s)
      a = Op::apply(a, T::widen(source(s)[i]));
    dst[i] = T::narrow(a);
  }
}

template <class Op>
TROUPE_AVX2 void reduce_many_typed(DType type, void* dst, const void* const* srcs, size_t nsrcs,
                                   size_t count) {
  switch (type) {
    case DType::kFloat32:
      return reduce_many<Float, Op>(static_cast<float*>(dst), srcs, nsrcs, count);
    case DType::kFloat16:
      return reduce_many<Half, Op>(static_cast<uint16_t*>(dst), srcs, nsrcs, count);
    case DType::kBFloat16:
      return reduce_many<BFloat16, Op>(static_cast<uint16_t*>(dst), srcs, nsrcs, count);
  }
}

TROUPE_AVX2 void reduce_many(DType type, ReduceOp op, void* dst, const void* const* srcs,
                             size_t nsrcs, size_t count) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return reduce_many_typed<Sum>(type, dst, srcs, nsrcs, count);
    case ReduceOp::kMax:
      return reduce_many_typed<Max>(type, dst, srcs, nsrcs, count);
    case ReduceOp::kMin:
      return reduce_many_typed<Min>(type, dst, srcs, nsrcs, count);
  }
}

// Multiplies unfused, like the portable multiply().
template <class T>
TROUPE_AVX2 void scale(typename T::Elem* data, size_t count, float factor) {
  const __m256 f = _mm256_set1_ps(factor);
  const size_t vector_count = count / kLanes * kLanes;
  for (size_t i = 0; i < vector_count; i += kLanes) {
    const Lanes v = T::load(data + i);
    T::store(data + i, {_mm256_mul_ps(v.lo, f), _mm256_mul_ps(v.hi, f)});
  }
  for (size_t i = vector_count; i < count; ++i)
    data[i] = T::narrow(T::widen(data[i]) * factor);
}

TROUPE_AVX2 void scale(DType type, void* data, size_t count, float factor) {
  switch (type) {
    case DType::kFloat32:
      return scale<Float>(static_cast<float*>(data), count, factor);
    case DType::kFloat16:
      return scale<Half>(static_cast<uint16_t*>(data), count, factor);
    case DType::kBFloat16:
      return scale<BFloat16>(static_cast<uint16_t*>(data), count, factor);
  }
}

}  // namespace avx2
#endif  // TROUPE_REDUCE_HAVE_AVX2

// Whether to run the AVX2 kernels: when the CPU has AVX2 and F16C (and the
// OS saves their registers), unless TROUPE_REDUCE_KERNELS=portable asks for
// the portable ones (to compare them, or to test them on such a CPU). Read
// once, at the first call.
bool use_avx2() {
#if TROUPE_REDUCE_HAVE_AVX2
  static const bool enabled = [] {
    const char* forced = std::getenv("TROUPE_REDUCE_KERNELS");
    if (forced != nullptr && std::string_view(forced) == "portable") return false;
    // (Clang before 16 has no "f16c" for __builtin_cpu_supports: cpuid.)
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && f16c;
  }();
  return enabled;
#else
  return false;
#endif
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
#if TROUPE_REDUCE_HAVE_AVX2
  if (use_avx2()) return avx2::reduce_many(type, op, dst, srcs, nsrcs, count);
#endif
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
#if TROUPE_REDUCE_HAVE_AVX2
  if (use_avx2()) return avx2::scale(type, data, count, factor);
#endif
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
