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
  // Only with OpenBLAS's pthreads build, whose own workers yield-spin while the OpenMP ones
  // would spin too. With its OpenMP build there is one pool, and libgomp's default (spin a
  // little after each region, then sleep; spin less when threads outnumber the CPUs) keeps the
  // workers awake between the many short regions of a step: a sleeping worker woken for every
  // region cost 20-27% of a 2-thread step.
  if (unset("OMP_WAIT_POLICY") && !gemm_runs_on_caller_in_parallel()) {
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
