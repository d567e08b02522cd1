#include "transport/collectives/detail/stream_copy.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

namespace troupe::transport::detail {

void stream_copy(void* dst, const void* src, size_t n) {
#if defined(__x86_64__)
  auto* d = static_cast<std::byte*>(dst);
  const auto* s = static_cast<const std::byte*>(src);
  // Up to the destination's first 16-byte boundary, plainly.
  const size_t head = std::min(n, (16 - reinterpret_cast<uintptr_t>(d) % 16) % 16);
  std::memcpy(d, s, head);
  d += head;
  s += head;
  n -= head;
  // 64 bytes (a cache line) a turn: four aligned streaming stores.
  for (; n >= 64; n -= 64, d += 64, s += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 32));
    const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(d), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 48), e);
  }
  std::memcpy(d, s, n);
  _mm_sfence();  // streaming stores are weakly ordered: order them before what follows
#else
  std::memcpy(dst, src, n);
#endif
}

void copy_block(void* dst, const void* src, size_t n) {
  if (n >= kStreamCopyBytes) {
    stream_copy(dst, src, n);
  } else {
    std::memcpy(dst, src, n);
  }
}

}  // namespace troupe::transport::detail
