// The peak FLOP/s a CPU core reaches in single-precision matrix products (SGEMM through gemm.h):
// the denominator of model FLOP utilisation on the CPU, as a GPU's datasheet peak is on a GPU.
// Measured on one thread, once per CPU model and BLAS, and cached:
//
//   double peak = cpu_sgemm_peak();   // e.g. 9.5e10 FLOP/s a core (cached after the first call)
//   double mfu = model_flops_per_s / (peak * threads);
#pragma once

#include <string>

namespace troupe::nn {

struct CpuPeak {
  double flops_per_s = 0;  // one core's best SGEMM rate
  std::string source;      // "measured", "cached in FILE"
};

// Times 512 x 512 x 512 products on one thread (a fraction of a second) and returns the best
// rate. Sets the process's thread count to 1 while it runs and back after (threads.h).
double measure_sgemm_peak();

// measure_sgemm_peak(), measured once for this CPU model and BLAS (gemm_backend()) and kept in
// $XDG_CACHE_HOME/troupe/cpu_peak (else ~/.cache/troupe/cpu_peak): one line per CPU, "MODEL |
// BLAS | FLOP/s". A cache that cannot be read or written costs only the measurement.
CpuPeak cpu_sgemm_peak();

}  // namespace troupe::nn
