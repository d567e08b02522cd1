#include "nn/gemm.h"

#include <omp.h>

#include <cblas.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <mutex>
#include <string_view>

#include "nn/threads.h"

namespace troupe::nn {
namespace {

void check_arguments(bool trans_a, bool trans_b, int M, int N, int K, int lda, int ldb, int ldc) {
  const int a_cols = trans_a ? M : K;
  const int b_cols = trans_b ? K : N;
  const char* problem = nullptr;
  if (M < 0 || N < 0 || K < 0) {
    problem = "negative dimension";
  } else if (lda < std::max(1, a_cols)) {
    problem = "lda is less than A's row length";
  } else if (ldb < std::max(1, b_cols)) {
    problem = "ldb is less than B's row length";
  } else if (ldc < std::max(1, N)) {
    problem = "ldc is less than N";
  }
  if (problem == nullptr) return;
  std::fprintf(stderr,
               "troupe::nn::gemm: %s: C[%d x %d] = op(A)[%d x %d] op(B)[%d x %d] with A %s "
               "(lda %d), B %s (ldb %d), ldc %d\n",
               problem, M, N, M, K, K, N, trans_a ? "transposed" : "as is", lda,
               trans_b ? "transposed" : "as is", ldb, ldc);
  std::abort();
}

bool core_is_one_of(std::string_view core, std::initializer_list<std::string_view> names) {
  return std::any_of(names.begin(), names.end(), [core](std::string_view name) {
    return core.size() == name.size() &&
           std::equal(core.begin(), core.end(), name.begin(), [](unsigned char a, unsigned char b) {
             return std::tolower(a) == std::tolower(b);
           });
  });
}

}  // namespace

bool gemm_runs_on_caller_in_parallel() {
  static const bool openmp = openblas_get_parallel() == 2;  // 0 serial, 1 pthreads, 2 OpenMP
  return openmp;
}

std::string gemm_backend() {
  const char* config = openblas_get_config();  // "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ..."
  const std::string_view text = config;
  const std::string_view version = text.substr(0, text.find(' ', text.find(' ') + 1));
  const int parallel = openblas_get_parallel();
  return std::string(version) + " (" + openblas_get_corename() + " kernels, " +
         (parallel == 2   ? "OpenMP"
          : parallel == 1 ? "pthreads"
                          : "serial") +
         ")";
}

std::string gemm_backend_warning() {
#if defined(__x86_64__)
  const std::string_view core = openblas_get_corename();
  __builtin_cpu_init();
  const char* better = nullptr;
  if (__builtin_cpu_supports("avx512f")) {
    if (!core_is_one_of(core, {"SkylakeX", "Cooperlake", "SapphireRapids"})) better = "SkylakeX";
  } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    if (!core_is_one_of(core, {"Haswell", "Zen", "SkylakeX", "Cooperlake", "SapphireRapids"})) {
      better = "Haswell";
    }
  }
  if (better != nullptr) {
    return std::string("OpenBLAS runs its ") + std::string(core) + " kernels on a CPU with " +
           (std::string_view(better) == "SkylakeX" ? "AVX-512" : "AVX2 and FMA") +
           " (it does not know this CPU model): GEMM runs several times slower than it could. "
           "Set OPENBLAS_CORETYPE=" +
           better + " in the environment of the process.";
  }
#endif
  return "";
}

void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
          const float* B, int ldb, float beta, float* C, int ldc) {
  check_arguments(trans_a, trans_b, M, N, K, lda, ldb, ldc);
  if (M == 0 || N == 0) return;
  if (K == 0) {  // no product: C = beta * C (BLAS implementations differ here)
    for (int i = 0; i < M; ++i) {
      float* row = C + static_cast<int64_t>(i) * ldc;
      for (int j = 0; j < N; ++j)
        row[j] = beta == 0.0f ? 0.0f : beta * row[j];
    }
    return;
  }
  static std::once_flag checked;
  std::call_once(checked, [] {
    num_threads();  // settles OpenBLAS's thread count
    if (const std::string warning = gemm_backend_warning(); !warning.empty()) {
      std::fprintf(stderr, "troupe::nn::gemm: %s\n", warning.c_str());
    }
  });
  // OpenBLAS's OpenMP build takes its thread count from the calling thread's
  // OpenMP setting (omp_get_max_threads), not from openblas_set_num_threads:
  // keep that per-thread setting at num_threads() on every thread that calls
  // (an actor's dedicated thread is not the one that set the count). Inside
  // a parallel region OpenBLAS runs on the caller alone either way.
  if (!omp_in_parallel() && omp_get_max_threads() != num_threads()) {
    omp_set_num_threads(num_threads());
  }
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace troupe::nn
