// DDP benchmark: troupe's DdpTrainer and PyTorch DistributedDataParallel (gloo) side by side in
// one invocation, on 1 and 2 data-parallel replicas.
//
//   ddp_bench [--configs small,medium] [--dp-list 1,2] [--threads N] [--steps 10] [--warmup 2]
//             [--repeat 3] [--bucket-elements N] [--json FILE] [--skip-torch]
//             [--no-overlap-ref] [--min-cpu 0.85] [--retries 2] [--keep-omp-env]
//
// troupe: a LocalCluster (a head and max(dp) worker processes of the troupe executable, on
// loopback) and this process as the driver; DdpTrainer (trainers/ddp_trainer.h) with dp
// replicas of a GPT, micro-batch B per replica, no gradient accumulation, AdamW (lr 1e-4, betas
// 0.9/0.95, eps 1e-8, weight decay 0.1), no clipping, the synthetic addition task as data,
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
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "actors/param_shard_actor.h"
#include "actors/pipeline_stage_actor.h"
#include "bench/bench_util.h"
#include "bench/compute_env.h"
#include "core/cluster/cluster.h"
#include "core/cluster/local_cluster.h"
#include "nn/gpt_param_layout.h"
#include "trainers/config.h"
#include "trainers/ddp_trainer.h"

#ifndef TROUPE_BINARY
#define TROUPE_BINARY "troupe"
#endif
#ifndef TROUPE_DDP_BENCH_TORCH_SCRIPT
#define TROUPE_DDP_BENCH_TORCH_SCRIPT "bench/ddp_bench_torch.py"
#endif

namespace troupe::bench {
namespace {

constexpr int kTorchTimeoutS = 900;  // one PyTorch run, start to end

struct ModelConfig {
  std::string name;
  int L, C, NH, V, T, B;    // B: the micro-batch of each replica; V a multiple of 64 (no padding)
  int64_t bucket_elements;  // reduce_bucket_size: about one block, so several buckets
  nn::GPTConfig gpt() const {
    return {.max_seq_len = T,
            .vocab_size = V,
            .padded_vocab_size = V,
            .num_layers = L,
            .num_heads = NH,
            .channels = C};
  }
  size_t params() const { return nn::GPTParamLayout(gpt()).num_params(); }
  double bucket_mib() const { return static_cast<double>(bucket_elements) * 4 / (1 << 20); }
};

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

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "ddp_bench: %s\n", what.c_str());
  std::exit(1);
}

template <class T>
T value_or_die(absl::StatusOr<T> r, const std::string& what) {
  if (!r.ok()) die(what + ": " + r.status().ToString());
  return *std::move(r);
}

int cores_available() {
  cpu_set_t set;
  CPU_ZERO(&set);
  return sched_getaffinity(0, sizeof(set), &set) == 0 ? std::max(1, CPU_COUNT(&set)) : 1;
}

double load_average() {
  std::ifstream in("/proc/loadavg");
  double load = -1;
  in >> load;
  return load;
}

// CPU seconds (user + system) that process `pid` has used, all threads; 0 if unreadable.
double process_cpu_seconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t paren = stat.rfind(')');
  if (paren == std::string::npos) return 0;
  std::istringstream fields(stat.substr(paren + 2));
  std::string field;
  double ticks = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i) {  // utime is field 14, stime 15
    if (i >= 14) ticks += std::strtod(field.c_str(), nullptr);
  }
  return ticks / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

// ---- troupe -------------------------------------------------------------------------------

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

trainers::TrainConfig train_config(const ModelConfig& mc, int dp, int64_t bucket_elements,
                                   bool overlap) {
  trainers::TrainConfig c;
  c.parallel.dp = dp;
  c.gradient_accumulation_steps = 1;
  c.micro_batch_size = mc.B;
  c.train_batch_size = static_cast<int64_t>(mc.B) * dp;
  c.model = {.max_seq_len = mc.T,
             .vocab_size = mc.V,
             .padded_vocab_size = mc.V,
             .num_layers = mc.L,
             .num_heads = mc.NH,
             .channels = mc.C};
  c.data.synthetic = trainers::SyntheticTaskConfig{
      .task = "addition", .digits = 3, .num_samples = 4096, .seed = 7};
  c.optimizer.type = trainers::OptimizerType::kAdamW;
  c.optimizer.adamw = {
      .lr = 1e-4f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
  c.schedule = nn::LrSchedule::constant(1e-4f);
  c.gradient_clipping = 0;
  c.zero.reduce_bucket_size = bucket_elements;
  c.zero.overlap_comm = overlap;
  c.training.seed = 1337;
  return c;
}

class TroupeSide {
 public:
  // `omp_threads` > 0: the workers start with OMP_NUM_THREADS set to it (see main()).
  TroupeSide(int workers, int omp_threads) : omp_threads_(omp_threads) {
    cluster::LocalClusterOptions o;
    o.workers = workers;
    o.default_resources = "CPU=2";
    o.troupe_binary = TROUPE_BINARY;
    o.echo_output = false;
    const char* was = std::getenv("OMP_NUM_THREADS");
    const std::string saved = was != nullptr ? was : "";
    if (omp_threads > 0) ::setenv("OMP_NUM_THREADS", std::to_string(omp_threads).c_str(), 1);
    local_ = value_or_die(cluster::LocalCluster::start(o), "starting the local cluster");
    if (omp_threads > 0) {  // the workers have it; this process and the peer keep their own
      if (was != nullptr) {
        ::setenv("OMP_NUM_THREADS", saved.c_str(), 1);
      } else {
        ::unsetenv("OMP_NUM_THREADS");
      }
    }
    driver_ = value_or_die(Cluster::connect(local_->client_options()), "connecting the driver");
  }
  int omp_threads() const { return omp_threads_; }
  ~TroupeSide() {
    driver_.reset();  // before the cluster it is connected to
    local_.reset();
  }

  double workers_cpu_seconds() const {
    double sum = 0;
    for (int i = 0; i < local_->num_workers(); ++i)
      sum += process_cpu_seconds(local_->worker_pid(i));
    return sum;
  }

  // One run of warmup + steps steps. `direct`: the steps are driven here, replica by replica,
  // as TrainerController::step drives them (run_step on every stage, then prepare and commit on
  // every shard; no clipping, loss scale 1), for each replica's StepReport: tail_ms and skew_ms.
  // Otherwise
  // through the trainer's controller (overhead_ms is only measured so).
  TroupeRun run(const ModelConfig& mc, int dp, int threads, int steps, int warmup,
                int64_t bucket_elements, bool overlap, bool direct = false) {
    const std::string job =
        "ddp-bench-" + mc.name + "-dp" + std::to_string(dp) + "-" + std::to_string(++jobs_);
    const std::string what = mc.name + " dp " + std::to_string(dp);
    auto trainer =
        value_or_die(trainers::DdpTrainer::start(
                         *driver_, train_config(mc, dp, bucket_elements, overlap), job, threads),
                     what + ": starting the trainer");
    std::vector<trainers::StepOutcome> timed;
    std::vector<double> losses, tails, skews;
    constexpr absl::Duration kStepTimeout = absl::Minutes(10);
    // A step as the controller runs it, keeping what each replica reported.
    auto direct_step = [&](int64_t k) -> absl::StatusOr<trainers::StepOutcome> {
      const auto start = std::chrono::steady_clock::now();
      const std::vector<trainers::MeshMember>& members = trainer->controller().members();
      std::vector<Future<actors::StepReport>> running;
      for (const trainers::MeshMember& m : members)
        running.push_back(m.stage->run_step(actors::StepRequest{.step = k, .loss_scale = 1.0f}));
      std::vector<actors::StepReport> reports;
      for (auto& f : running) {
        absl::StatusOr<actors::StepReport> report = std::move(f).get(kStepTimeout);
        if (!report.ok()) return report.status();
        reports.push_back(*report);
      }
      std::vector<Future<void>> preparing;
      for (const trainers::MeshMember& m : members)
        preparing.push_back(m.shard->prepare(k));
      for (auto& f : preparing) {
        if (absl::Status s = std::move(f).get(kStepTimeout); !s.ok()) return s;
      }
      std::vector<Future<int64_t>> committing;
      for (const trainers::MeshMember& m : members)
        committing.push_back(
            m.shard->commit(actors::CommitRequest{.step = k, .lr = 1e-4f, .grad_scale = 1.0f}));
      for (auto& f : committing) {
        if (absl::StatusOr<int64_t> n = std::move(f).get(kStepTimeout); !n.ok()) return n.status();
      }
      trainers::StepOutcome o;
      o.applied = true;
      double min_compute = 1e300, tail = 0;
      for (const actors::StepReport& r : reports) {
        const double compute = r.forward_ms + r.backward_ms;
        o.loss += r.loss / static_cast<double>(reports.size());
        o.samples += r.samples;
        o.tokens += r.tokens;
        if (compute >= o.compute_ms) tail = r.comm_exposed_ms;
        o.compute_ms = std::max(o.compute_ms, compute);
        min_compute = std::min(min_compute, compute);
        o.comm_ms = std::max(o.comm_ms, r.comm_ms);
        o.comm_exposed_ms = std::max(o.comm_exposed_ms, r.comm_exposed_ms);
      }
      o.step_ms = seconds_since(start) * 1e3;
      if (k > warmup) {
        tails.push_back(tail);
        skews.push_back(o.compute_ms - min_compute);
      }
      return o;
    };
    double cpu_start = 0;
    auto wall_start = std::chrono::steady_clock::now();  // reset after the warm-up
    for (int k = 1; k <= warmup + steps; ++k) {
      if (k == warmup + 1) {
        cpu_start = workers_cpu_seconds();
        wall_start = std::chrono::steady_clock::now();
      }
      trainers::StepOutcome o = value_or_die(direct ? direct_step(k) : trainer->step(k),
                                             what + ": step " + std::to_string(k));
      if (!o.applied || !std::isfinite(o.loss)) {
        die(what + ": step " + std::to_string(k) + " was not applied (loss " +
            std::to_string(o.loss) + ")");
      }
      losses.push_back(o.loss);
      if (k > warmup) timed.push_back(o);
    }
    const double wall = seconds_since(wall_start);
    const double cpu = workers_cpu_seconds() - cpu_start;
    if (absl::Status s = trainer->stop(); !s.ok()) die(what + ": stop: " + s.ToString());
    TroupeRun r;
    auto med = [&](double trainers::StepOutcome::*field) {
      std::vector<double> v;
      for (const trainers::StepOutcome& o : timed)
        v.push_back(o.*field);
      return median(v);
    };
    r.step_ms = med(&trainers::StepOutcome::step_ms);
    r.compute_ms = med(&trainers::StepOutcome::compute_ms);
    r.comm_ms = med(&trainers::StepOutcome::comm_ms);
    r.exposed_ms = med(&trainers::StepOutcome::comm_exposed_ms);
    r.overhead_ms = med(&trainers::StepOutcome::overhead_ms);
    for (const trainers::StepOutcome& o : timed) {
      r.sum_comm_ms += o.comm_ms;
      r.sum_exposed_ms += o.comm_exposed_ms;
    }
    r.samples_per_step = static_cast<double>(timed.back().samples);
    r.tokens_per_step = static_cast<double>(timed.back().tokens);
    r.cpu_share = cpu / (wall * dp * threads);
    r.cpu_ms_per_step = cpu * 1e3 / steps;
    r.loss_first = losses.front();
    r.loss_last = losses.back();
    r.tail_ms = median(tails);
    r.skew_ms = median(skews);
    return r;
  }

 private:
  int omp_threads_ = 0;
  std::unique_ptr<cluster::LocalCluster> local_;
  std::unique_ptr<Cluster> driver_;
  int jobs_ = 0;
};

// ---- PyTorch ------------------------------------------------------------------------------

// The first interpreter that can import torch: $TROUPE_TORCH_PYTHON, the venv at /tmp/torchenv,
// python3, /usr/bin/python3.
std::optional<std::string> find_torch_python() {
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("TROUPE_TORCH_PYTHON"); env != nullptr && *env != '\0') {
    candidates.push_back(env);
  }
  if (::access("/tmp/torchenv/bin/python", X_OK) == 0) {
    candidates.push_back("/tmp/torchenv/bin/python");
  }
  candidates.push_back("python3");
  candidates.push_back("/usr/bin/python3");
  for (const std::string& python : candidates) {
    std::string probe = "timeout 120 " + shell_quote(python) + " -c 'import torch' >/dev/null 2>&1";
    if (std::system(probe.c_str()) == 0) return python;
  }
  return std::nullopt;
}

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

TorchRun run_torch(const std::string& python, const ModelConfig& mc, int dp, int threads, int steps,
                   int warmup, int64_t bucket_elements) {
  const double bucket_mb = static_cast<double>(bucket_elements) * 4 / (1 << 20);
  char bucket[32];
  std::snprintf(bucket, sizeof bucket, "%.6f", bucket_mb);
  std::string cmd = "timeout -k 10 " + std::to_string(kTorchTimeoutS + 60) + " " +
                    shell_quote(python) + " " + shell_quote(TROUPE_DDP_BENCH_TORCH_SCRIPT) +
                    " --dp " + std::to_string(dp) + " --threads " + std::to_string(threads) +
                    " --steps " + std::to_string(steps) + " --warmup " + std::to_string(warmup) +
                    " --bucket-cap-mb " + bucket + " --timeout " + std::to_string(kTorchTimeoutS) +
                    " --parent-pid " + std::to_string(::getpid()) + " --config " + mc.name + ":" +
                    std::to_string(mc.L) + ":" + std::to_string(mc.C) + ":" +
                    std::to_string(mc.NH) + ":" + std::to_string(mc.V) + ":" +
                    std::to_string(mc.T) + ":" + std::to_string(mc.B);
  std::fflush(stdout);
  TorchRun run;
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) {
    run.why = "peer failed: cannot start " + python;
    return run;
  }
  std::string out;
  char chunk[4096];
  size_t got;
  while ((got = std::fread(chunk, 1, sizeof chunk, pipe)) > 0)
    out.append(chunk, got);
  const int status = ::pclose(pipe);
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::string json;  // the last line that holds a JSON object
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty() && line.front() == '{') json = line;
  }
  if (code == 3) {
    std::string reason = json_string(json, "skipped");
    run.why = "peer skipped: " + (reason.empty() ? std::string("cannot run here") : reason);
    return run;
  }
  if (code == 124 || code == 137) {
    run.why = "peer failed: timed out after " + std::to_string(kTorchTimeoutS) + " s";
    return run;
  }
  std::optional<double> samples = json_number(json, "samples_per_s");
  if (code != 0 || !samples) {
    run.why = "peer failed: exit code " + std::to_string(code) + " (its reason is above)";
    return run;
  }
  run.ok = true;
  run.version = json_string(json, "torch_version");
  run.attention = json_string(json, "attention");
  auto num = [&](const char* key) { return json_number(json, key).value_or(0); };
  run.step_s = num("step_s");
  run.samples_per_s = *samples;
  run.tokens_per_s = num("tokens_per_s");
  run.params = num("params");
  run.cpu_share = num("cpu_share");
  run.cpu_s_per_step = num("cpu_s_per_step");
  run.nosync_step_s = num("nosync_step_s");
  run.comm_alone_s = num("comm_alone_s");
  run.num_buckets = num("num_buckets");
  run.tail_s = json_number(json, "tail_s").value_or(-1);
  run.loss_first = num("loss_first");
  run.loss_last = num("loss_last");
  return run;
}

// ---- Output -------------------------------------------------------------------------------

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

std::string percent(double fraction) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%.0f%%", fraction * 100);
  return buf;
}

std::string json_escape(const std::string& s) {
  std::string out;
  for (char ch : s) {
    if (ch == '"' || ch == '\\') out += '\\';
    out += ch;
  }
  return out;
}

void json_list(std::ostream& out, const std::vector<double>& v) {
  out << "[";
  for (size_t i = 0; i < v.size(); ++i)
    out << (i ? ", " : "") << v[i];
  out << "]";
}

bool write_ddp_json(const std::string& path, const std::string& peer,
                    const std::vector<Case>& cases) {
  std::ofstream out(path);
  if (!out) return false;
  out << "{\n  \"benchmark\": \"ddp_bench\",\n  \"peer\": \"" << json_escape(peer)
      << "\",\n  \"cases\": [\n";
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const bool multi = c.dp > 1;
    std::vector<double> troupe_sps, torch_sps, step_ms, exposed, overhead;
    for (const TroupeRun& r : c.troupe) {
      troupe_sps.push_back(r.samples_per_s());
      step_ms.push_back(r.step_ms);
      exposed.push_back(r.exposed_ms);
      overhead.push_back(r.overhead_ms);
    }
    for (const TorchRun& r : c.torch)
      torch_sps.push_back(r.samples_per_s);
    out << "    {\"name\": \"" << c.mc.name << " dp" << c.dp
        << "\", \"unit\": \"samples/s\", \"troupe\": " << c.troupe_sps()
        << ", \"peer\": " << (c.torch.empty() ? 0 : c.torch_sps()) << ", \"ratio\": " << c.ratio()
        << ", \"config\": \"" << c.mc.name << "\", \"dp\": " << c.dp
        << ", \"threads\": " << c.threads << ", \"params\": " << c.mc.params()
        << ", \"micro_batch\": " << c.mc.B << ", \"seq_len\": " << c.mc.T
        << ", \"bucket_elements\": " << c.bucket_elements << ", \"buckets\": " << c.num_buckets
        << ", \"troupe_tokens_per_s\": "
        << Case::med(c.troupe, [](const TroupeRun& r) { return r.tokens_per_s(); })
        << ", \"troupe_step_ms\": " << median(step_ms) << ", \"troupe_compute_ms\": "
        << Case::med(c.troupe, [](const TroupeRun& r) { return r.compute_ms; })
        << ", \"troupe_comm_ms\": "
        << Case::med(c.troupe, [](const TroupeRun& r) { return r.comm_ms; })
        << ", \"troupe_comm_exposed_ms\": " << median(exposed)
        << ", \"troupe_overhead_ms\": " << median(overhead) << ", \"troupe_cpu_share\": "
        << Case::med(c.troupe, [](const TroupeRun& r) { return r.cpu_share; })
        << ", \"troupe_cpu_ms_per_step\": "
        << Case::med(c.troupe, [](const TroupeRun& r) { return r.cpu_ms_per_step; });
    if (multi) {
      out << ", \"troupe_hidden_counters\": " << c.hidden_counters();
      if (!c.serial.empty()) {
        auto o = [&](double TroupeRun::*f) {
          return Case::med(c.overlapped, [f](const TroupeRun& r) { return r.*f; });
        };
        auto se = [&](double TroupeRun::*f) {
          return Case::med(c.serial, [f](const TroupeRun& r) { return r.*f; });
        };
        out << ", \"ref_overlap_step_ms\": " << o(&TroupeRun::step_ms)
            << ", \"ref_overlap_compute_ms\": " << o(&TroupeRun::compute_ms)
            << ", \"ref_overlap_tail_ms\": " << o(&TroupeRun::tail_ms)
            << ", \"ref_overlap_skew_ms\": " << o(&TroupeRun::skew_ms)
            << ", \"ref_serial_step_ms\": " << se(&TroupeRun::step_ms)
            << ", \"ref_serial_compute_ms\": " << se(&TroupeRun::compute_ms)
            << ", \"ref_serial_allreduce_ms\": " << c.serial_ms()
            << ", \"ref_serial_skew_ms\": " << se(&TroupeRun::skew_ms)
            << ", \"troupe_hidden_tail\": " << c.hidden_tail()
            << ", \"troupe_hidden_step\": " << c.hidden_step();
      }
    }
    if (!c.torch.empty()) {
      out << ", \"peer_step_ms\": "
          << Case::med(c.torch, [](const TorchRun& r) { return r.step_s * 1e3; })
          << ", \"peer_cpu_share\": "
          << Case::med(c.torch, [](const TorchRun& r) { return r.cpu_share; })
          << ", \"peer_cpu_ms_per_step\": "
          << Case::med(c.torch, [](const TorchRun& r) { return r.cpu_s_per_step * 1e3; });
      if (multi) {
        out << ", \"peer_nosync_step_ms\": "
            << Case::med(c.torch, [](const TorchRun& r) { return r.nosync_step_s * 1e3; })
            << ", \"peer_comm_alone_ms\": "
            << Case::med(c.torch, [](const TorchRun& r) { return r.comm_alone_s * 1e3; })
            << ", \"peer_hidden_step\": " << c.torch_hidden();
        if (c.torch_has_tail()) {
          out << ", \"peer_tail_ms\": "
              << Case::med(c.torch, [](const TorchRun& r) { return r.tail_s * 1e3; })
              << ", \"peer_hidden_tail\": " << c.torch_hidden_tail();
        }
      }
    } else {
      out << ", \"peer_skipped\": \"" << json_escape(c.torch_why) << "\"";
    }
    out << ", \"troupe_samples_per_s_runs\": ";
    json_list(out, troupe_sps);
    out << ", \"peer_samples_per_s_runs\": ";
    json_list(out, torch_sps);
    out << ", \"ratio_runs\": ";
    json_list(out, c.ratios());
    std::vector<double> troupe_cpu, peer_cpu;
    for (const TroupeRun& r : c.troupe)
      troupe_cpu.push_back(r.cpu_share);
    for (const TorchRun& r : c.torch)
      peer_cpu.push_back(r.cpu_share);
    out << ", \"troupe_cpu_share_runs\": ";
    json_list(out, troupe_cpu);
    out << ", \"peer_cpu_share_runs\": ";
    json_list(out, peer_cpu);
    out << "}" << (i + 1 < cases.size() ? "," : "") << "\n";
  }
  out << "  ]\n}\n";
  return static_cast<bool>(out);
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
  nn::GPTParamLayout layout(mc.gpt());
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
}  // namespace troupe::bench

using namespace troupe::bench;

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

  // The table. hidden: counters (the stage's: 1 - exposed / comm), tail (1 - the last replica's
  // wait with overlap / without); PyTorch's is the tail kind (1 - the last rank's wait after its
  // last gradient / the allreduce alone). The step kind (the step time overlap saves / the
  // allreduce alone) is in the JSON only: on a shared machine the step times move by more than
  // the allreduce takes.
  std::printf("\n%-7s %2s %7s %10s %10s %7s %11s %18s %8s %9s\n", "config", "dp", "threads",
              "troupe", peer == "none" ? "peer" : "PyTorch", "ratio", "(min-max)",
              "troupe hidden %", "PyTorch", "overhead");
  std::printf("%-7s %2s %7s %10s %10s %7s %11s %18s %8s %9s\n", "", "", "", "samples/s",
              "samples/s", "", "", "counters/tail", "hidden %", "ms/step");
  bool ratio_met = true, any_peer = false;
  std::string hidden_goal = "-", tail_goal = "-";
  for (const Case& c : cases) {
    std::string peer_sps = "-", ratio = "-", spread = "", hidden = "-", th = "-";
    char buf[64];
    if (!c.torch.empty()) {
      any_peer = true;
      std::snprintf(buf, sizeof buf, "%.1f", c.torch_sps());
      peer_sps = buf;
      std::snprintf(buf, sizeof buf, "%.2fx", c.ratio());
      ratio = buf;
      std::vector<double> rs = c.ratios();
      std::snprintf(buf, sizeof buf, "(%.2f-%.2f)", *std::min_element(rs.begin(), rs.end()),
                    *std::max_element(rs.begin(), rs.end()));
      spread = buf;
      if (c.ratio() < 1.2) ratio_met = false;
      if (c.dp > 1 && c.torch_has_tail()) th = percent(c.torch_hidden_tail());
    }
    if (c.dp > 1) {
      hidden = percent(c.hidden_counters());
      if (hidden_goal == "-") hidden_goal = "met";
      if (c.hidden_counters() < 0.8) hidden_goal = "not met";
      if (!c.serial.empty()) {
        if (tail_goal == "-") tail_goal = "met";
        if (c.hidden_tail() < 0.8) tail_goal = "not met";
      }
      if (!c.serial.empty()) {
        hidden += "/" + percent(c.hidden_tail());
      } else {
        hidden += "/-";
      }
    }
    std::printf("%-7s %2d %7d %10.1f %10s %7s %11s %18s %8s %9.2f\n", c.mc.name.c_str(), c.dp,
                c.threads, c.troupe_sps(), peer_sps.c_str(), ratio.c_str(), spread.c_str(),
                hidden.c_str(), th.c_str(),
                Case::med(c.troupe, [](const TroupeRun& r) { return r.overhead_ms; }));
  }
  for (const Case& c : cases) {
    if (c.torch.empty())
      std::printf("%s dp %d: %s\n", c.mc.name.c_str(), c.dp, c.torch_why.c_str());
  }
  if (disturbed > 0) {
    std::printf(
        "%d runs got less than %.0f%% of their cores and ran again (or were kept, as the "
        "last attempt)\n",
        disturbed, min_cpu * 100);
  }
  std::printf(
      "goal, troupe >= 1.2x PyTorch DDP samples/s: %s; >= 80%% of the allreduce hidden: %s by "
      "the counters, %s by the tail\n",
      any_peer ? (ratio_met ? "met" : "not met") : "-", hidden_goal.c_str(), tail_goal.c_str());
  // Where the steps go (medians, ms). troupe through the controller: step, compute (forward +
  // backward, slowest replica), the longest wait for the allreduce after backward, the share of
  // the cores and CPU time per sample (all replicas; other load barely moves it, unlike wall
  // times). Replica by replica, overlap on / off: step, the last replica's wait (off: the
  // allreduce alone), the replicas' spread of compute. PyTorch: step, step under no_sync(), the
  // allreduce alone, the last rank's wait after its last gradient, its share of the cores and CPU
  // per sample.
  std::printf("\n%-7s %2s | %7s %7s %7s %5s %7s | %7s %6s %7s %6s %6s | %7s %7s %7s %6s %5s %7s\n",
              "config", "dp", "step", "compute", "exposed", "cpu", "cpu/smp", "ov.step", "ov.tail",
              "ser.step", "allred", "spread", "pt.step", "no_sync", "pt.comm", "pt.tail", "cpu",
              "cpu/smp");
  for (const Case& c : cases) {
    auto t = [&](double TroupeRun::*f) {
      return Case::med(c.troupe, [f](const TroupeRun& r) { return r.*f; });
    };
    auto o = [&](double TroupeRun::*f) {
      return c.overlapped.empty()
                 ? 0.0
                 : Case::med(c.overlapped, [f](const TroupeRun& r) { return r.*f; });
    };
    auto s = [&](double TroupeRun::*f) {
      return c.serial.empty() ? 0.0 : Case::med(c.serial, [f](const TroupeRun& r) { return r.*f; });
    };
    auto p = [&](double TorchRun::*f, double scale) {
      return c.torch.empty()
                 ? 0.0
                 : Case::med(c.torch, [f, scale](const TorchRun& r) { return r.*f * scale; });
    };
    const double samples = static_cast<double>(c.mc.B) * c.dp;
    std::printf(
        "%-7s %2d | %7.1f %7.1f %7.1f %4.0f%% %7.1f | %7.1f %6.1f %7.1f %6.1f %6.1f | %7.1f %7.1f "
        "%7.1f %6.1f %4.0f%% %7.1f\n",
        c.mc.name.c_str(), c.dp, t(&TroupeRun::step_ms), t(&TroupeRun::compute_ms),
        t(&TroupeRun::exposed_ms), t(&TroupeRun::cpu_share) * 100,
        t(&TroupeRun::cpu_ms_per_step) / samples, o(&TroupeRun::step_ms), o(&TroupeRun::tail_ms),
        s(&TroupeRun::step_ms), s(&TroupeRun::tail_ms), o(&TroupeRun::skew_ms),
        p(&TorchRun::step_s, 1e3), p(&TorchRun::nosync_step_s, 1e3),
        p(&TorchRun::comm_alone_s, 1e3), c.torch_has_tail() ? p(&TorchRun::tail_s, 1e3) : 0.0,
        p(&TorchRun::cpu_share, 100), p(&TorchRun::cpu_s_per_step, 1e3) / samples);
  }
  if (!json.empty() && !write_ddp_json(json, peer, cases)) {
    std::fprintf(stderr, "ddp_bench: cannot write %s\n", json.c_str());
    return 1;
  }
  return 0;
}
