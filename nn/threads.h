// How many threads nn's kernels (OpenMP) and GEMM (OpenBLAS) use.
//
// One process-wide setting for both, so that a worker running one stage
// actor can give it every core and a worker running several can split them.
// Every kernel partitions its work statically over this many threads: for a
// fixed count the results are the same bits run after run (and the
// reductions in kernels.h give the same bits for any count).
//
// Both libraries keep their own pool of threads, which spin for a while
// after a parallel region before they sleep; the OpenMP pool is per calling
// thread, so two actor threads each running kernels use two pools.
#pragma once

namespace troupe::nn {

// Sets the thread count for every thread of the process. REQUIRES: n >= 1.
void set_num_threads(int n);

// The thread count: set_num_threads()'s, else OpenMP's default at first use
// (OMP_NUM_THREADS if set, else the number of CPUs this process may run on).
int num_threads();

}  // namespace troupe::nn
