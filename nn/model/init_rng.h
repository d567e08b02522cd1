// The generator every architecture's initialisation draws from, in buffer order.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

namespace troupe::nn {

// xorshift64* seeded through splitmix64, normals by Box-Muller: the same seed gives the same
// parameters with every compiler and standard library (std::normal_distribution does not).
class InitRng {
 public:
  explicit InitRng(uint64_t seed) {
    uint64_t z = seed + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    state_ = (z ^ (z >> 31)) | 1;
  }
  // Uniform in (0, 1].
  double uniform() {
    state_ ^= state_ >> 12;
    state_ ^= state_ << 25;
    state_ ^= state_ >> 27;
    return static_cast<double>(((state_ * 0x2545F4914F6CDD1Dull) >> 11) + 1) * 0x1.0p-53;
  }
  void fill_normal(float* out, size_t n, double std) {
    constexpr double kTwoPi = 6.283185307179586;
    for (size_t i = 0; i < n; i += 2) {
      double r = std::sqrt(-2.0 * std::log(uniform())), theta = kTwoPi * uniform();
      out[i] = static_cast<float>(std * r * std::cos(theta));
      if (i + 1 < n) out[i + 1] = static_cast<float>(std * r * std::sin(theta));
    }
  }

 private:
  uint64_t state_;
};

}  // namespace troupe::nn
