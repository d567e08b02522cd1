// The portable random numbers of the data pipeline: splitmix64 (Steele,
// Lea and Flood 2014), the same sequence on every compiler and platform, so
// that a seed names the same shuffle, the same synthetic problems and the same
// held-out split everywhere. (std::uniform_int_distribution is
// implementation-defined and is not used.)
//
//   SplitMix64 rng(derive_seed(seed, epoch));
//   uint64_t i = rng.below(n);  // uniform in [0, n), unbiased
#pragma once

#include <cstdint>

namespace troupe::actors {

// splitmix64's output function: a bijective 64-bit mix.
constexpr uint64_t mix64(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// The seed of stream `stream` (an epoch, a purpose) under `seed`: distinct
// streams of one seed, and one stream of distinct seeds, are unrelated.
constexpr uint64_t derive_seed(uint64_t seed, uint64_t stream) {
  return mix64(mix64(seed ^ 0x6a09e667f3bcc909ULL) + stream);
}

class SplitMix64 {
 public:
  explicit constexpr SplitMix64(uint64_t seed) : state_(seed) {}

  constexpr uint64_t next() {
    state_ += 0x9e3779b97f4a7c15ULL;
    return mix64(state_);
  }

  // Uniform in [0, n) by rejection (no modulo bias). REQUIRES: n > 0.
  constexpr uint64_t below(uint64_t n) {
    const uint64_t threshold = (0 - n) % n;  // 2^64 mod n
    for (;;) {
      uint64_t r = next();
      if (r >= threshold) return r % n;
    }
  }

 private:
  uint64_t state_;
};

}  // namespace troupe::actors
