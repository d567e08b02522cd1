// zero_bench's parts. main (zero_bench.cc) reads the flags, writes the DeepSpeed JSON both sides
// read, and runs each ZeRO stage on every side, repeat by repeat: troupe's DataParallelTrainer
// on a LocalCluster (TroupeZero, zero_bench_sides.cc) and the peers through
// bench/zero_bench_peer.py (run_peer); then it prints the table. What is measured, and how: the
// top of zero_bench.cc.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace troupe {
class Cluster;
namespace cluster {
class LocalCluster;
}  // namespace cluster
}  // namespace troupe

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

// A LocalCluster of `ranks` worker processes of the troupe executable (OMP_NUM_THREADS =
// `threads` for them), with this process as the driver. A failure to start ends the process.
class TroupeZero {
 public:
  TroupeZero(int ranks, int threads);
  ~TroupeZero();
  // warmup + steps steps of the config at `path` with zero_optimization.stage = `stage` over
  // `ranks` ranks.
  Run run(const std::string& path, int stage, int steps, int warmup);

 private:
  int ranks_, threads_;
  std::unique_ptr<cluster::LocalCluster> local_;
  std::unique_ptr<Cluster> driver_;
  int jobs_ = 0;
};

// The first python that can import torch: $TROUPE_TORCH_PYTHON, /tmp/torchenv/bin/python,
// python3, /usr/bin/python3 (ddp_bench's find_torch_python).
std::optional<std::string> find_python();

// One run of bench/zero_bench_peer.py: `framework` "deepspeed" (at `stage`) or "fsdp2".
Run run_peer(const std::string& python, const std::string& framework, const std::string& path,
             int stage, int ranks, int threads, int steps, int warmup);

}  // namespace troupe::bench::zero
