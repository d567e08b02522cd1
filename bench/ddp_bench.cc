// DDP benchmark: troupe's DataParallelTrainer and PyTorch DistributedDataParallel (gloo) side by
// side in one invocation, on 1 and 2 data-parallel replicas.
//
//   ddp_bench [--configs small,medium] [--dp-list 1,2] [--threads N] [--steps 10] [--warmup 2]
//             [--repeat 3] [--bucket-elements N] [--json FILE] [--skip-torch]
//             [--no-overlap-ref] [--min-cpu 0.85] [--retries 2] [--keep-omp-env]
//
// troupe: a LocalCluster (a head and max(dp) worker processes of the troupe executable, on
// loopback) and this process as the driver; DataParallelTrainer (trainers/data_parallel_trainer.h)
// with dp replicas of a GPT, micro-batch B per replica, no gradient accumulation, AdamW (lr 1e-4,
// betas 0.9/0.95, eps 1e-8, weight decay 0.1), no clipping, the synthetic addition task as data,
// zero_optimization.reduce_bucket_size = the config's bucket (several buckets per model, so that
// the allreduce overlaps backward). A step of the job is dp x B samples; samples/s = dp x B /
// median step time (StepOutcome::step_ms, as the driver sees it). The workers start with
// OMP_NUM_THREADS = the threads per replica (a cluster per thread count; --keep-omp-env: as
// inherited): with the OpenMP build of OpenBLAS, GEMMs take their thread count from the calling
// thread's OpenMP setting, not from nn::set_num_threads.
//
// PyTorch: bench/ddp_bench_torch.py, the same GPT (gpt_bench_torch.py's), AdamW with the same
// settings and decay groups, B x T random tokens per replica, dp processes over gloo on
// 127.0.0.1, DistributedDataParallel(bucket_cap_mb = the same bucket in MiB); dp = 1 is the plain
// model, as troupe forms no group for one replica. Run with the first of $TROUPE_TORCH_PYTHON,
// /tmp/torchenv/bin/python, python3 and /usr/bin/python3 that can import torch, right after
// troupe's run of the same config and dp (never at the same time). Both sides: --threads compute
// threads per replica (default: the cores this process may use / dp, at least 1), --warmup steps,
// then --steps timed steps; --repeat pairs, the figures the medians over them, the ratio's
// spread (min-max over the pairs) printed beside it. The machines are shared: each run also
// reports its share of the cores (CPU time of the worker processes, or of PyTorch's ranks, /
// (wall time x dp x threads)), and a run that got less than --min-cpu runs again, up to
// --retries times (the last attempt is kept).
//
// Communication hidden behind backward (dp > 1), three ways:
//   counters: 1 - sum(comm_exposed_ms) / sum(comm_ms) over the timed steps, the stage's own
//             counters through the controller (comm_ms: each bucket's allreduce from issue to
//             when the stage saw it complete, summed over buckets; the stage looks only after
//             backward, so the rest of backward counts as communication and this overstates);
//   tail:     1 - the wait after backward of the replica that finished backward last, with
//             overlap / without (the allreduce alone): the other replicas wait for it too, and
//             that wait (load imbalance) is not communication;
//   step:     (the step without overlap - with) / the allreduce alone: what overlap saves, net
//             of the compute it slows down.
//   tail and step come from two more runs per repeat, overlap_comm on and off, driven replica by
//   replica from here (as TrainerController::step does) for every replica's StepReport;
//   --no-overlap-ref skips them.
// PyTorch (bench/ddp_bench_torch.py measures both): tail, 1 - the wait in backward() after the
// last gradient of the rank whose last gradient came last / the allreduce of every gradient
// alone in DDP's buckets (torch >= 2.1); step, 1 - (DDP step - the step under no_sync()) / the
// allreduce alone (JSON only).
// Controller overhead: median StepOutcome::overhead_ms (the step as the driver saw it minus the
// slowest stage's run_step and the commit).
#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "bench/compute_env.h"
#include "bench/ddp_bench.h"
#include "nn/model/model.h"

namespace troupe::bench::ddp {
namespace {

// small and medium are gpt_bench's 1M and 12M shapes with half and a quarter of its batch per
// replica: a dp = 2 step takes 0.3-2 s on the 2-core machine.
const std::vector<ModelConfig>& all_configs() {
  static const std::vector<ModelConfig> configs = {
      {"tiny", 2, 64, 4, 256, 32, 2, 16384},         // CI's smoke test, 3 buckets
      {"small", 4, 128, 4, 2048, 256, 8, 196608},    // 1.1M params, 5 buckets of 0.75 MiB
      {"medium", 6, 384, 6, 4096, 256, 4, 1572864},  // 12.3M params, 7 buckets of 6 MiB+
  };
  return configs;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string item; std::getline(in, item, ',');) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

// Buckets GradientBuckets (actors/gradient_buckets.h) makes for `mc`: whole backward phases
// (final LayerNorm, each block, the embeddings) grouped from the end until >= bucket_elements.
int count_buckets(const ModelConfig& mc, int64_t bucket_elements) {
  nn::ModelLayout layout = nn::model_layout(mc.gpt());
  std::vector<size_t> starts{layout.block_begin(mc.L)};
  for (int l = mc.L - 1; l >= 0; --l)
    starts.push_back(layout.block_begin(l));
  starts.push_back(0);
  size_t end = layout.num_params();
  int n = 0;
  for (size_t i = 0; i < starts.size(); ++i) {
    if (end - starts[i] >= static_cast<size_t>(bucket_elements) || i + 1 == starts.size()) {
      if (end > starts[i]) ++n;
      end = starts[i];
    }
  }
  return n;
}

}  // namespace
}  // namespace troupe::bench::ddp

using namespace troupe::bench;
using namespace troupe::bench::ddp;

int main(int argc, char** argv) {
  Flags flags(argc, argv);
  if (flags.has("--help")) {
    std::printf(
        "usage: ddp_bench [--configs small,medium] [--dp-list 1,2] [--threads N] [--steps 10]\n"
        "                 [--warmup 2] [--repeat 3] [--bucket-elements N] [--json FILE]\n"
        "                 [--skip-torch] [--no-overlap-ref] [--min-cpu 0.85] [--retries 2]\n"
        "                 [--keep-omp-env]\n"
        "configs:");
    for (const ModelConfig& mc : all_configs())
      std::printf(" %s (%zu params, B %d, T %d)", mc.name.c_str(), mc.params(), mc.B, mc.T);
    std::printf(
        "\n--threads: per replica, default cores / dp. PyTorch runs as the peer when\n"
        "$TROUPE_TORCH_PYTHON, /tmp/torchenv/bin/python, python3 or /usr/bin/python3 can\n"
        "import torch.\n");
    return 0;
  }
  const int threads_flag = static_cast<int>(flags.get_long("--threads", 0));
  const int steps = static_cast<int>(flags.get_long("--steps", 10));
  const int warmup = static_cast<int>(flags.get_long("--warmup", 2));
  const int repeat = static_cast<int>(flags.get_long("--repeat", 3));
  const int64_t bucket_flag = flags.get_long("--bucket-elements", 0);
  const std::string json = flags.get("--json", "");
  const bool skip_torch = flags.has("--skip-torch");
  const bool overlap_ref = !flags.has("--no-overlap-ref");
  const bool keep_omp_env = flags.has("--keep-omp-env");
  const int retries = static_cast<int>(flags.get_long("--retries", 2));
  const double min_cpu = std::strtod(flags.get("--min-cpu", "0.85").c_str(), nullptr);
  int disturbed = 0;
  if (threads_flag < 0 || steps < 1 || warmup < 0 || repeat < 1 || bucket_flag < 0 || retries < 0 ||
      !(min_cpu >= 0 && min_cpu <= 1)) {
    std::fprintf(stderr,
                 "ddp_bench: --steps and --repeat must be at least 1; --threads, --warmup, "
                 "--bucket-elements and --retries at least 0; --min-cpu in [0, 1]\n");
    return 2;
  }
  std::vector<ModelConfig> configs;
  for (const std::string& name : split(flags.get("--configs", "small,medium"))) {
    auto it = std::find_if(all_configs().begin(), all_configs().end(),
                           [&](const ModelConfig& mc) { return mc.name == name; });
    if (it == all_configs().end()) {
      std::fprintf(stderr, "ddp_bench: no config named %s (--help lists them)\n", name.c_str());
      return 2;
    }
    configs.push_back(*it);
  }
  std::vector<int> dps;
  for (const std::string& d : split(flags.get("--dp-list", "1,2"))) {
    int dp = std::atoi(d.c_str());
    if (dp < 1 || dp > 16) {
      std::fprintf(stderr, "ddp_bench: --dp-list: %s is not a replica count in [1, 16]\n",
                   d.c_str());
      return 2;
    }
    dps.push_back(dp);
  }
  if (configs.empty() || dps.empty()) {
    std::fprintf(stderr, "ddp_bench: --configs and --dp-list must name something\n");
    return 2;
  }

  reexec_keeping_peer_wait_policy(argv);  // bench/compute_env.h

  const int cores = cores_available();
  const int max_dp = *std::max_element(dps.begin(), dps.end());
  std::printf("ddp_bench: %d cores, %d warm-up + %d timed steps, %d repeats; load %.1f\n", cores,
              warmup, steps, repeat, load_average());
  std::printf("%-7s %3s %5s %4s %5s %4s %3s %10s %14s %8s\n", "config", "L", "C", "NH", "V", "T",
              "B", "params", "bucket (MiB)", "buckets");
  for (const ModelConfig& mc : configs) {
    const int64_t bucket = bucket_flag > 0 ? bucket_flag : mc.bucket_elements;
    std::printf("%-7s %3d %5d %4d %5d %4d %3d %10zu %14.3f %8d\n", mc.name.c_str(), mc.L, mc.C,
                mc.NH, mc.V, mc.T, mc.B, mc.params(), static_cast<double>(bucket) * 4 / (1 << 20),
                count_buckets(mc, bucket));
  }

  std::optional<std::string> python;
  std::string no_python_reason;
  if (skip_torch) {
    no_python_reason = "peer skipped: --skip-torch";
  } else {
    python = find_torch_python();
    if (!python) {
      no_python_reason =
          "peer skipped: no python that can import torch ($TROUPE_TORCH_PYTHON, "
          "/tmp/torchenv/bin/python, python3, /usr/bin/python3; see docs/benchmarks.md)";
    }
  }
  if (!python) std::printf("torch: %s\n", no_python_reason.c_str());
  // The wait policy this process was started with, for the peer and the workers (which set
  // passive for themselves where it is unset and OpenBLAS is the pthreads build).
  restore_peer_wait_policy();
  std::fflush(stdout);

  // The workers' OMP_NUM_THREADS is the compute threads per replica (as torchrun sets it): with
  // the OpenMP build of OpenBLAS, a GEMM runs on omp_get_max_threads() threads of the calling
  // thread whatever openblas_set_num_threads (nn::set_num_threads) said, so without it every
  // replica's GEMMs use every core. A cluster per thread count; --keep-omp-env: as inherited.
  std::unique_ptr<TroupeSide> troupe_cluster;
  auto troupe_for = [&](int threads) -> TroupeSide& {
    const int omp = keep_omp_env ? 0 : threads;
    if (!troupe_cluster || troupe_cluster->omp_threads() != omp) {
      troupe_cluster.reset();
      troupe_cluster = std::make_unique<TroupeSide>(max_dp, omp);
    }
    return *troupe_cluster;
  };
  std::string peer = "none";
  std::vector<Case> cases;
  for (const ModelConfig& mc : configs) {
    for (int dp : dps) {
      Case c;
      c.mc = mc;
      c.dp = dp;
      c.threads = threads_flag > 0 ? threads_flag : std::max(1, cores / dp);
      c.bucket_elements = bucket_flag > 0 ? bucket_flag : mc.bucket_elements;
      c.num_buckets = count_buckets(mc, c.bucket_elements);
      c.torch_why = no_python_reason;
      for (int r = 0; r < repeat; ++r) {
        // Each run again (up to --retries times) while it got less than --min-cpu of its cores:
        // another process had them, and its figures say nothing about either library.
        auto troupe_run = [&](bool overlap, bool direct) {
          TroupeRun t;
          for (int attempt = 0; attempt <= retries; ++attempt) {
            t = troupe_for(c.threads).run(mc, dp, c.threads, steps, warmup, c.bucket_elements,
                                          overlap, direct);
            if (direct) {
              std::printf(
                  "troupe: %s dp %d, replica by replica, overlap_comm %s: %.1f ms/step (compute "
                  "%.1f, last replica's wait %.1f, replicas' spread %.1f), cpu %.0f%%, load "
                  "%.1f%s\n",
                  mc.name.c_str(), dp, overlap ? "on" : "off", t.step_ms, t.compute_ms, t.tail_ms,
                  t.skew_ms, t.cpu_share * 100, load_average(),
                  t.cpu_share < min_cpu ? " (disturbed)" : "");
            } else {
              std::printf(
                  "troupe: %s dp %d: %.1f ms/step (compute %.1f, comm %.1f, exposed %.1f, "
                  "overhead %.2f), %.1f samples/s, %.0f tokens/s, loss %.4f -> %.4f, cpu %.0f%%, "
                  "load %.1f%s\n",
                  mc.name.c_str(), dp, t.step_ms, t.compute_ms, t.comm_ms, t.exposed_ms,
                  t.overhead_ms, t.samples_per_s(), t.tokens_per_s(), t.loss_first, t.loss_last,
                  t.cpu_share * 100, load_average(), t.cpu_share < min_cpu ? " (disturbed)" : "");
            }
            std::fflush(stdout);
            if (t.cpu_share >= min_cpu) break;
            ++disturbed;
          }
          return t;
        };
        c.troupe.push_back(troupe_run(true, false));
        if (python) {
          for (int attempt = 0; attempt <= retries; ++attempt) {
            TorchRun p = run_torch(*python, mc, dp, c.threads, steps, warmup, c.bucket_elements);
            if (!p.ok) {
              std::printf("torch: %s dp %d: %s\n", mc.name.c_str(), dp, p.why.c_str());
              c.torch_why = p.why;
              break;
            }
            if (p.params != static_cast<double>(mc.params())) {
              std::printf("ddp_bench: WARNING: %s has %zu parameters here and %.0f in PyTorch\n",
                          mc.name.c_str(), mc.params(), p.params);
            }
            if (p.cpu_share < min_cpu && attempt < retries) {
              std::printf("torch: %s dp %d: cpu %.0f%% (disturbed), again\n", mc.name.c_str(), dp,
                          p.cpu_share * 100);
              ++disturbed;
              continue;
            }
            peer = "PyTorch " + p.version + " DDP (gloo)";
            c.torch.push_back(p);
            break;
          }
        }
        if (dp > 1 && overlap_ref) {
          c.overlapped.push_back(troupe_run(true, true));
          c.serial.push_back(troupe_run(false, true));
        }
      }
      cases.push_back(std::move(c));
    }
  }

  print_report(cases, peer, disturbed, min_cpu);
  if (!json.empty() && !write_ddp_json(json, peer, cases)) {
    std::fprintf(stderr, "ddp_bench: cannot write %s\n", json.c_str());
    return 1;
  }
  return 0;
}
