// ddp_bench's parts. main (ddp_bench.cc) reads the flags and runs each (config, dp) on both
// sides, repeat by repeat: troupe's DataParallelTrainer on a LocalCluster (ddp_bench_troupe.cc) and
// PyTorch DDP through bench/ddp_bench_torch.py (ddp_bench_torch.cc); then it prints the tables
// and writes the JSON (ddp_bench_report.cc). What is measured, and how: the top of ddp_bench.cc.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "nn/model/model.h"

namespace troupe {
class Cluster;
namespace cluster {
class LocalCluster;
}  // namespace cluster
}  // namespace troupe

namespace troupe::bench::ddp {

struct ModelConfig {
  std::string name;
  int L, C, NH, V, T, B;    // B: the micro-batch of each replica; V a multiple of 64 (no padding)
  int64_t bucket_elements;  // reduce_bucket_size: about one block, so several buckets
  nn::ModelConfig gpt() const {
    return nn::GPTConfig{.max_seq_len = T,
                         .vocab_size = V,
                         .padded_vocab_size = V,
                         .num_layers = L,
                         .num_heads = NH,
                         .channels = C};
  }
  size_t params() const { return nn::model_layout(gpt()).num_params(); }
  double bucket_mib() const { return static_cast<double>(bucket_elements) * 4 / (1 << 20); }
};

// small and medium are gpt_bench's 1M and 12M shapes with half and a quarter of its batch per

// ---- troupe (ddp_bench_troupe.cc) ---------------------------------------------------------

struct TroupeRun {
  double step_ms = 0;  // medians over the timed steps
  double compute_ms = 0;
  double comm_ms = 0;
  double exposed_ms = 0;
  double overhead_ms = 0;
  double sum_comm_ms = 0;  // over the timed steps
  double sum_exposed_ms = 0;
  double samples_per_step = 0;
  double tokens_per_step = 0;
  double cpu_share = 0;        // workers' CPU time / (wall time x dp x threads)
  double cpu_ms_per_step = 0;  // workers' CPU time per timed step, all replicas
  double loss_first = 0, loss_last = 0;
  // Driven replica by replica (TroupeSide::run's `direct`): medians over the steps of the wait
  // of the replica that finished forward + backward last (the allreduce's own tail, free of the
  // other replicas' lateness) and of the spread of the replicas' forward + backward.
  double tail_ms = 0;
  double skew_ms = 0;
  double samples_per_s() const { return samples_per_step / (step_ms / 1e3); }
  double tokens_per_s() const { return tokens_per_step / (step_ms / 1e3); }
  double hidden_counters() const { return sum_comm_ms > 0 ? 1 - sum_exposed_ms / sum_comm_ms : 0; }
};

// A LocalCluster of `workers` worker processes of the troupe executable, with this process as
// its driver. A failure to start it, or in a run, ends the process (exit code 1, with a message).
class TroupeSide {
 public:
  // `omp_threads` > 0: the workers start with OMP_NUM_THREADS set to it (see main()).
  TroupeSide(int workers, int omp_threads);
  int omp_threads() const { return omp_threads_; }
  ~TroupeSide();

  double workers_cpu_seconds() const;

  // One run of warmup + steps steps. `direct`: the steps are driven here, replica by replica,
  // as TrainerController::step drives them (run_step on every stage, then prepare and commit on
  // every shard; no clipping, loss scale 1), for each replica's StepReport: tail_ms and skew_ms.
  // Otherwise
  // through the trainer's controller (overhead_ms is only measured so).
  TroupeRun run(const ModelConfig& mc, int dp, int threads, int steps, int warmup,
                int64_t bucket_elements, bool overlap, bool direct = false);

 private:
  int omp_threads_ = 0;
  std::unique_ptr<cluster::LocalCluster> local_;
  std::unique_ptr<Cluster> driver_;
  int jobs_ = 0;
};

// ---- PyTorch (ddp_bench_torch.cc) ---------------------------------------------------------

struct TorchRun {
  bool ok = false;
  std::string why;  // when not ok: "peer skipped: ..." or "peer failed: ..."
  std::string version, attention;
  double step_s = 0, samples_per_s = 0, tokens_per_s = 0, params = 0, cpu_share = 0;
  double cpu_s_per_step = 0;
  double nosync_step_s = 0, comm_alone_s = 0, num_buckets = 0;
  double tail_s = -1;  // -1: not measured (torch < 2.1)
  double loss_first = 0, loss_last = 0;
  // PyTorch's hidden fraction: 1 - (step - no_sync step) / allreduce alone; dp > 1 only.
  double hidden() const {
    if (comm_alone_s <= 0) return 0;
    return 1 - std::max(0.0, step_s - nosync_step_s) / comm_alone_s;
  }
  // 1 - the last rank's wait after its last gradient / the allreduce alone; troupe's tail kind.
  double hidden_tail() const {
    if (comm_alone_s <= 0 || tail_s < 0) return 0;
    return 1 - tail_s / comm_alone_s;
  }
};

// One run of bench/ddp_bench_torch.py (dp ranks over gloo, warmup + steps steps) and what it
// reported; not ok, with the reason in `why`, when it skipped itself, failed or timed out.
TorchRun run_torch(const std::string& python, const ModelConfig& mc, int dp, int threads, int steps,
                   int warmup, int64_t bucket_elements);

// ---- Output (ddp_bench_report.cc) ---------------------------------------------------------

// One (config, dp): every repeat's runs.
struct Case {
  ModelConfig mc;
  int dp = 1;
  int threads = 1;
  int64_t bucket_elements = 0;
  std::vector<TroupeRun> troupe;
  // dp > 1, unless --no-overlap-ref: driven replica by replica, with overlap_comm on and off.
  std::vector<TroupeRun> overlapped;
  std::vector<TroupeRun> serial;
  std::vector<TorchRun> torch;  // the runs that succeeded
  std::string torch_why;        // the last reason a run did not
  int num_buckets = 0;

  template <class R, class F>
  static double med(const std::vector<R>& runs, F f) {
    std::vector<double> v;
    for (const R& r : runs)
      v.push_back(f(r));
    return median(v);
  }
  double troupe_sps() const {
    return med(troupe, [](const TroupeRun& r) { return r.samples_per_s(); });
  }
  double torch_sps() const {
    return med(torch, [](const TorchRun& r) { return r.samples_per_s; });
  }
  // Ratios of the pairs run back to back (repeat i's troupe against repeat i's PyTorch).
  std::vector<double> ratios() const {
    std::vector<double> v;
    for (size_t i = 0; i < std::min(troupe.size(), torch.size()); ++i)
      v.push_back(troupe[i].samples_per_s() / torch[i].samples_per_s);
    return v;
  }
  double ratio() const { return torch.empty() ? 0 : median(ratios()); }
  double hidden_counters() const {
    return med(troupe, [](const TroupeRun& r) { return r.hidden_counters(); });
  }
  // The allreduce alone: the tail of the serial runs (every bucket issued after backward).
  double serial_ms() const {
    return med(serial, [](const TroupeRun& r) { return r.tail_ms; });
  }
  // 1 - the tail left with overlap / the allreduce alone.
  double hidden_tail() const {
    if (serial.empty() || serial_ms() <= 0) return 0;
    return 1 - med(overlapped, [](const TroupeRun& r) { return r.tail_ms; }) / serial_ms();
  }
  // The step time overlap saves over the serial run, as a share of the allreduce alone: what is
  // hidden net of the compute the overlapping allreduce slows down (PyTorch's definition).
  double hidden_step() const {
    if (serial.empty() || serial_ms() <= 0) return 0;
    return (med(serial, [](const TroupeRun& r) { return r.step_ms; }) -
            med(overlapped, [](const TroupeRun& r) { return r.step_ms; })) /
           serial_ms();
  }
  double torch_hidden() const {
    return med(torch, [](const TorchRun& r) { return r.hidden(); });
  }
  bool torch_has_tail() const {
    return !torch.empty() &&
           std::all_of(torch.begin(), torch.end(), [](const TorchRun& r) { return r.tail_s >= 0; });
  }
  double torch_hidden_tail() const {
    return med(torch, [](const TorchRun& r) { return r.hidden_tail(); });
  }
};

// The tables, once every case has run: samples/s side by side (the ratio and its spread, the
// shares of the allreduce hidden, the controller's overhead), the peer's reasons where it did
// not run, the runs that ran again, the goals; then where the steps go. `peer`: "none", or the
// peer that ran; `disturbed`: the runs that got less than `min_cpu` of their cores.
void print_report(const std::vector<Case>& cases, const std::string& peer, int disturbed,
                  double min_cpu);

// Every case's figures as JSON, each repeat's too. False if `path` cannot be written.
bool write_ddp_json(const std::string& path, const std::string& peer,
                    const std::vector<Case>& cases);

}  // namespace troupe::bench::ddp
