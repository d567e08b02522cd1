// ddp_bench's troupe side: DataParallelTrainer on a LocalCluster of troupe worker processes,
// through the trainer's controller or replica by replica; see ddp_bench.h.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "actors/param_shard_actor.h"
#include "actors/pipeline_stage_actor.h"
#include "bench/bench_fail.h"
#include "bench/ddp_bench.h"
#include "core/cluster/cluster.h"
#include "core/cluster/local_cluster.h"
#include "trainers/config.h"
#include "trainers/data_parallel_trainer.h"

#ifndef TROUPE_BINARY
#define TROUPE_BINARY "troupe"
#endif

namespace troupe::bench::ddp {
namespace {
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

trainers::TrainConfig train_config(const ModelConfig& mc, int dp, int64_t bucket_elements,
                                   bool overlap) {
  trainers::TrainConfig c;
  c.parallel.dp = dp;
  c.gradient_accumulation_steps = 1;
  c.micro_batch_size = mc.B;
  c.train_batch_size = static_cast<int64_t>(mc.B) * dp;
  c.model = nn::GPTConfig{.max_seq_len = mc.T,
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
  c.lr_schedule = nn::LrSchedule::constant(1e-4f);
  c.gradient_clipping = 0;
  c.zero.reduce_bucket_size = bucket_elements;
  c.zero.overlap_comm = overlap;
  c.training.seed = 1337;
  return c;
}

}  // namespace

TroupeSide::TroupeSide(int workers, int omp_threads) : omp_threads_(omp_threads) {
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

TroupeSide::~TroupeSide() {
  driver_.reset();  // before the cluster it is connected to
  local_.reset();
}

double TroupeSide::workers_cpu_seconds() const {
  double sum = 0;
  for (int i = 0; i < local_->num_workers(); ++i)
    sum += process_cpu_seconds(local_->worker_pid(i));
  return sum;
}

TroupeRun TroupeSide::run(const ModelConfig& mc, int dp, int threads, int steps, int warmup,
                          int64_t bucket_elements, bool overlap, bool direct) {
  const std::string job =
      "ddp-bench-" + mc.name + "-dp" + std::to_string(dp) + "-" + std::to_string(++jobs_);
  const std::string what = mc.name + " dp " + std::to_string(dp);
  auto trainer =
      value_or_die(trainers::DataParallelTrainer::start(
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

}  // namespace troupe::bench::ddp
