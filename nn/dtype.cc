#include "nn/dtype.h"

#include <algorithm>
#include <cstring>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#define TROUPE_NN_HAVE_AVX2 1
// Functions that use AVX2 and F16C, called only once the CPU is known to have them.
#define TROUPE_NN_AVX2 __attribute__((target("avx2,f16c")))
#else
#define TROUPE_NN_HAVE_AVX2 0
#endif

namespace troupe::nn {
namespace {

// 16-bit to 16-bit conversions go through fp32 scratch this many elements at a time.
constexpr int64_t kBlock = 1024;

using Widen = void (*)(const uint16_t*, float*, int64_t);
using Narrow = void (*)(const float*, uint16_t*, int64_t);

struct Path {
  Widen half_to_float;
  Widen bf16_to_float;
  Narrow float_to_half;
  Narrow float_to_bf16;
};

void widen_half(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    dst[i] = half_to_float(src[i]);
}
void widen_bf16(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    dst[i] = bf16_to_float(src[i]);
}
void narrow_half(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    dst[i] = float_to_half(src[i]);
}
void narrow_bf16(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    dst[i] = float_to_bf16(src[i]);
}

constexpr Path kPortable = {widen_half, widen_bf16, narrow_half, narrow_bf16};

#if TROUPE_NN_HAVE_AVX2
// 16 elements a time; the last n % 16 through the scalar conversions. Each
// lane gives the scalar function's bits: F16C rounds to nearest even as its
// immediate says (not MXCSR), handles subnormals exactly and quiets NaNs
// keeping the payload's top; bf16 is the scalar integer code lane by lane.
namespace avx2 {

TROUPE_NN_AVX2 void widen_half(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm256_castsi256_si128(h)));
    _mm256_storeu_ps(dst + i + 8, _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1)));
  }
  nn::widen_half(src + i, dst + i, n - i);
}

TROUPE_NN_AVX2 void narrow_half(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m128i lo = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    const __m128i hi = _mm256_cvtps_ph(_mm256_loadu_ps(src + i + 8), _MM_FROUND_TO_NEAREST_INT);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm256_set_m128i(hi, lo));
  }
  nn::narrow_half(src + i, dst + i, n - i);
}

// 8 bf16 widened: shifted into the high half, a NaN given the quiet bit.
TROUPE_NN_AVX2 __m256 widen_bf16_8(__m128i b) {
  const __m256 v = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(b), 16));
  const __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
  return _mm256_or_ps(v, _mm256_and_ps(nan, _mm256_castsi256_ps(_mm256_set1_epi32(0x00400000))));
}

TROUPE_NN_AVX2 void widen_bf16(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    _mm256_storeu_ps(dst + i, widen_bf16_8(_mm256_castsi256_si128(b)));
    _mm256_storeu_ps(dst + i + 8, widen_bf16_8(_mm256_extracti128_si256(b, 1)));
  }
  nn::widen_bf16(src + i, dst + i, n - i);
}

// float_to_bf16 of 8 lanes, in the low 16 bits of each: add 0x7fff plus the
// lowest kept bit, or for a NaN set the quiet bit and add nothing.
TROUPE_NN_AVX2 __m256i narrow_bf16_8(__m256 v) {
  const __m256i bits = _mm256_castps_si256(v);
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  const __m256i increment =
      _mm256_andnot_si256(nan, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7fff)));
  const __m256i quiet = _mm256_and_si256(nan, _mm256_set1_epi32(0x00400000));
  return _mm256_srli_epi32(_mm256_add_epi32(_mm256_or_si256(bits, quiet), increment), 16);
}

TROUPE_NN_AVX2 void narrow_bf16(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i lo = narrow_bf16_8(_mm256_loadu_ps(src + i));
    const __m256i hi = narrow_bf16_8(_mm256_loadu_ps(src + i + 8));
    // packus interleaves 128-bit lanes (lo0 hi0 lo1 hi1); the permute restores order.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, hi), 0xd8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), packed);
  }
  nn::narrow_bf16(src + i, dst + i, n - i);
}

}  // namespace avx2

constexpr Path kAvx2 = {avx2::widen_half, avx2::widen_bf16, avx2::narrow_half, avx2::narrow_bf16};
#endif  // TROUPE_NN_HAVE_AVX2

Widen widen_for(const Path& path, DType type) {
  return type == DType::kFloat16 ? path.half_to_float : path.bf16_to_float;
}
Narrow narrow_for(const Path& path, DType type) {
  return type == DType::kFloat16 ? path.float_to_half : path.float_to_bf16;
}

void convert_with(const Path& path, const void* src, DType src_type, void* dst, DType dst_type,
                  int64_t n) {
  if (n <= 0) return;
  if (src_type == dst_type) {
    std::memcpy(dst, src, static_cast<size_t>(n) * element_size(src_type));
  } else if (src_type == DType::kFloat32) {
    narrow_for(path, dst_type)(static_cast<const float*>(src), static_cast<uint16_t*>(dst), n);
  } else if (dst_type == DType::kFloat32) {
    widen_for(path, src_type)(static_cast<const uint16_t*>(src), static_cast<float*>(dst), n);
  } else {
    const auto* in = static_cast<const uint16_t*>(src);
    auto* out = static_cast<uint16_t*>(dst);
    float scratch[kBlock];
    for (int64_t begin = 0; begin < n; begin += kBlock) {
      const int64_t count = std::min(kBlock, n - begin);
      widen_for(path, src_type)(in + begin, scratch, count);
      narrow_for(path, dst_type)(scratch, out + begin, count);
    }
  }
}

}  // namespace

size_t element_size(DType type) {
  return type == DType::kFloat32 ? 4 : 2;
}

const char* to_string(DType type) {
  switch (type) {
    case DType::kFloat32:
      return "float32";
    case DType::kBFloat16:
      return "bfloat16";
    case DType::kFloat16:
      return "float16";
  }
  return "unknown";
}

void convert(const void* src, DType src_type, void* dst, DType dst_type, int64_t n) {
#if TROUPE_NN_HAVE_AVX2
  if (detail::has_avx2_f16c()) return convert_with(kAvx2, src, src_type, dst, dst_type, n);
#endif
  convert_with(kPortable, src, src_type, dst, dst_type, n);
}

namespace detail {

bool has_avx2_f16c() {
#if TROUPE_NN_HAVE_AVX2
  static const bool available = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
    __builtin_cpu_init();
    return f16c && __builtin_cpu_supports("avx2");
  }();
  return available;
#else
  return false;
#endif
}

void convert_portable(const void* src, DType src_type, void* dst, DType dst_type, int64_t n) {
  convert_with(kPortable, src, src_type, dst, dst_type, n);
}

void convert_avx2(const void* src, DType src_type, void* dst, DType dst_type, int64_t n) {
#if TROUPE_NN_HAVE_AVX2
  convert_with(kAvx2, src, src_type, dst, dst_type, n);
#else
  convert_with(kPortable, src, src_type, dst, dst_type, n);
#endif
}

}  // namespace detail
}  // namespace troupe::nn
