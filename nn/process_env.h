// Settings that the BLAS and OpenMP runtimes read only when they load, so a
// program must have them in its environment from its start.
#pragma once

namespace troupe::nn {

// For main(), first thing. If a setting below is missing and worth having,
// sets it and re-executes the program (same pid, same arguments); else, or
// if the re-execution fails, returns and the program goes on as it is.
//
//   OPENBLAS_CORETYPE        when OpenBLAS does not know this CPU model and
//                            would run its generic kernels (see
//                            gemm_backend_warning() in gemm.h)
//   OMP_WAIT_POLICY=passive  with OpenBLAS's pthreads build only: so that
//                            OpenMP's idle threads sleep instead of
//                            spinning against OpenBLAS's threads (its
//                            OpenMP build shares one pool, and libgomp's
//                            default of spinning briefly is faster)
//
// A variable already set is never changed; TROUPE_KEEP_ENV=1 turns all of
// this off.
void reexec_with_compute_environment(char** argv);

}  // namespace troupe::nn
