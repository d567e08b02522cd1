// A pause instruction for spin loops in transport (core has its own in
// core/detail/futex.h; transport does not depend on core).
#pragma once

namespace troupe::transport::detail {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace troupe::transport::detail
