// The compute environment of the benches that run troupe's nn beside a PyTorch peer (gpt_bench,
// ddp_bench). troupe runs as its worker processes start (cli/main.cc,
// nn::reexec_with_compute_environment): OPENBLAS_CORETYPE where OpenBLAS does not know this CPU,
// OMP_WAIT_POLICY=passive with the pthreads OpenBLAS. The peer gets the OpenBLAS setting
// (Debian's torch runs on OpenBLAS too) but not the wait policy, which is troupe's own choice:
// PyTorch runs with the policy the bench was started with (OpenMP's default when unset).
//
//   reexec_keeping_peer_wait_policy(argv);  // first thing in main()
//   ...                                     // this process's OpenMP reads the policy
//   restore_peer_wait_policy();             // before starting the peer (or troupe's workers)
#pragma once

#include <cstdlib>

#include "nn/process_env.h"

namespace troupe::bench {

inline constexpr char kPeerWaitPolicyVar[] = "TROUPE_BENCH_PEER_WAIT_POLICY";

// Remembers OMP_WAIT_POLICY as the bench was started ("" when unset), once, then runs
// nn::reexec_with_compute_environment (which may start the program again with the settings).
inline void reexec_keeping_peer_wait_policy(char** argv) {
  if (std::getenv("TROUPE_COMPUTE_ENV_SET") == nullptr) {
    const char* policy = std::getenv("OMP_WAIT_POLICY");
    ::setenv(kPeerWaitPolicyVar, policy != nullptr ? policy : "", 1);
  }
  nn::reexec_with_compute_environment(argv);
}

// Puts OMP_WAIT_POLICY back as the bench was started, for the processes it starts from now on.
inline void restore_peer_wait_policy() {
  const char* policy = std::getenv(kPeerWaitPolicyVar);
  if (policy == nullptr) return;
  if (*policy == '\0') {
    ::unsetenv("OMP_WAIT_POLICY");
  } else {
    ::setenv("OMP_WAIT_POLICY", policy, 1);
  }
}

}  // namespace troupe::bench
