#include "nn/process_env.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "nn/gemm.h"

namespace troupe::nn {
namespace {

bool unset(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr || *value == '\0';
}

// The core type gemm_backend_warning() recommends, or "".
std::string recommended_coretype() {
  const std::string warning = gemm_backend_warning();
  const std::string key = "OPENBLAS_CORETYPE=";
  size_t at = warning.find(key);
  if (at == std::string::npos) return "";
  at += key.size();
  size_t end = warning.find_first_of(" .", at);
  return warning.substr(at, end - at);
}

}  // namespace

void reexec_with_compute_environment(char** argv) {
  if (!unset("TROUPE_KEEP_ENV") || !unset("TROUPE_COMPUTE_ENV_SET")) return;
  bool changed = false;
  if (unset("OPENBLAS_CORETYPE")) {
    if (std::string core = recommended_coretype(); !core.empty()) {
      setenv("OPENBLAS_CORETYPE", core.c_str(), 1);
      changed = true;
    }
  }
  if (unset("OMP_WAIT_POLICY")) {
    setenv("OMP_WAIT_POLICY", "passive", 1);
    changed = true;
  }
  if (!changed) return;
  setenv("TROUPE_COMPUTE_ENV_SET", "1", 1);  // never twice
  execv("/proc/self/exe", argv);
  std::fprintf(stderr,
               "troupe: could not re-execute with OPENBLAS_CORETYPE/OMP_WAIT_POLICY set (%s)\n",
               std::strerror(errno));
}

}  // namespace troupe::nn
