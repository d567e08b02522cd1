#include "nn/threads.h"

#include <cblas.h>
#include <omp.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>

namespace troupe::nn {
namespace {

std::atomic<int> g_threads{0};  // 0: not yet set

}  // namespace

void set_num_threads(int n) {
  if (n < 1) {
    std::fprintf(stderr, "troupe::nn::set_num_threads(%d): the count must be at least 1\n", n);
    std::abort();
  }
  g_threads.store(n);
  openblas_set_num_threads(n);
  omp_set_num_threads(n);  // this thread's; gemm() sets it on other calling threads
}

int num_threads() {
  const int n = g_threads.load(std::memory_order_relaxed);
  if (n > 0) return n;
  // First use: OpenBLAS follows OpenMP's default, so the two agree.
  static const int initial = [] {
    const int count = omp_get_max_threads();
    int expected = 0;
    if (g_threads.compare_exchange_strong(expected, count)) openblas_set_num_threads(count);
    return count;
  }();
  (void)initial;
  return g_threads.load(std::memory_order_relaxed);
}

}  // namespace troupe::nn
