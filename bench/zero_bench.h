// zero_bench's parts. main (zero_bench.cc) reads the flags, writes the DeepSpeed JSON both sides
// read, and runs each ZeRO stage on every side, repeat by repeat: troupe's DataParallelTrainer
// on a LocalCluster (run_troupe, zero_bench_sides.cc) and the peers through
// bench/zero_bench_peer.py (run_peer); then it prints the table. What is measured, and how: the
// top of zero_bench.cc.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace troupe::bench::zero {

// One run of one side at one stage: medians over the timed steps.
struct Run {
  bool ok = false;
  std::string why;  // when not ok: the reason (a peer skipped or failed)
  double samples_per_s = 0;
  double step_ms = 0;
  double peak_rss = 0;      // bytes, the largest rank's
  double sent_bytes = -1;   // per rank per step; -1: not measured
  double model_state = -1;  // bytes per rank (troupe: measured; the peers: not reported)
  double loss_first = 0, loss_last = 0;
  std::string note;  // the peer's optimizer, versions
};

// warmup + steps steps of the config at `path` with zero_optimization.stage = `stage` over
// `ranks` ranks of `threads` compute threads: on a LocalCluster of its own (`ranks` worker
// processes of the troupe executable, OMP_NUM_THREADS = `threads` for them, this process as the
// driver), so that each run's peak RSS is its own, as each peer run's is. A failure ends the
// process.
Run run_troupe(const std::string& path, int stage, int ranks, int threads, int steps, int warmup);

// One run of bench/zero_bench_peer.py: `framework` "deepspeed" (at `stage`) or "fsdp2".
Run run_peer(const std::string& python, const std::string& framework, const std::string& path,
             int stage, int ranks, int threads, int steps, int warmup);

}  // namespace troupe::bench::zero
