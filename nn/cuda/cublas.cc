#include <dlfcn.h>

#include <mutex>
#include <string>

#include "absl/strings/str_cat.h"
#include "nn/cuda/detail/cublas.h"

namespace troupe::nn::cuda::detail {
namespace {

struct Loaded {
  absl::Status status;
  CublasApi api;
};

template <class F>
bool resolve(void* library, const char* name, F* out, absl::Status* status) {
  *out = reinterpret_cast<F>(::dlsym(library, name));
  if (*out != nullptr) return true;
  *status = absl::FailedPreconditionError(absl::StrCat("cuBLAS has no ", name));
  return false;
}

Loaded load() {
  Loaded l;
  const std::string name = absl::StrCat("libcublas.so.", CUBLAS_VER_MAJOR);
  void* library = ::dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char* why = ::dlerror();
    l.status = absl::FailedPreconditionError(
        absl::StrCat("cannot load ", name, " (", why != nullptr ? why : "not found",
                     "): put the CUDA toolkit's library folder on LD_LIBRARY_PATH"));
    return l;
  }
  CublasApi& a = l.api;
  // The exported names behind cublas_v2.h's macros.
  (void)(resolve(library, "cublasCreate_v2", &a.create, &l.status) &&
         resolve(library, "cublasDestroy_v2", &a.destroy, &l.status) &&
         resolve(library, "cublasSetStream_v2", &a.set_stream, &l.status) &&
         resolve(library, "cublasSetMathMode", &a.set_math_mode, &l.status) &&
         resolve(library, "cublasSgemm_v2", &a.sgemm, &l.status) &&
         resolve(library, "cublasSgemmStridedBatched", &a.sgemm_strided_batched, &l.status) &&
         resolve(library, "cublasGemmEx", &a.gemm_ex, &l.status) &&
         resolve(library, "cublasGemmStridedBatchedEx", &a.gemm_strided_batched_ex, &l.status) &&
         resolve(library, "cublasGetStatusName", &a.status_name, &l.status) &&
         resolve(library, "cublasGetStatusString", &a.status_string, &l.status));
  return l;  // the library stays loaded for the life of the process
}

const Loaded& loaded() {
  static const Loaded l = load();
  return l;
}

}  // namespace

absl::Status load_cublas() {
  return loaded().status;
}

const CublasApi& cublas() {
  return loaded().api;
}

bool cublas_loaded() {
  return loaded().status.ok();
}

}  // namespace troupe::nn::cuda::detail
