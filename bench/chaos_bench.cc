// Chaos benchmark: a training job whose workers are killed at random moments,
// and what each loss costs it.
//
//   chaos_bench [--trials 30] [--steps 8] [--zero 0] [--threads 1] [--seed 1]
//               [--buddy-steps 10] [--repeat 3] [--tiny] [--skip-buddy] [--skip-peers]
//               [--json FILE]
//
// The model is ddp_bench's medium config (a GPT of 6 layers x 384, 6 heads, seq 256, vocab
// 4096: 12.3M parameters; micro-batch 4 per rank), AdamW, dp 2 (--zero: the ZeRO stage; 0 is
// DDP), on a local cluster of two workers and a spare (one CPU each); --tiny: CI's smoke size.
//
// 1. Trials. A reference run of --steps steps without failures, then --trials runs, each a
//    fresh job: before a random step (from 2 to steps - 1) a thread SIGKILLs the worker of a
//    random rank after a random delay of up to 1.2 step times - in the forward, the backward,
//    the allreduce, the commit, or just after the step. A worker joins after each recovery, so
//    that there is a spare again. A trial succeeds when the job finishes with the reference
//    run's weights, bit for bit, and the same samples at every step. Reported: the success
//    rate; the time from the kill to the next committed step (median, p90) split into detect
//    (kill until the loss is known), replace (until the replacement runs), restore (its state,
//    the groups, the loaders) and resume (until the step run again is committed); and the
//    steps lost. Goals: 100% bitwise; at most 3 s median from the kill to the next committed
//    step; at most the step in flight lost.
// 2. Buddy replication (ZeRO): step time of ZeRO-3 over dp 2 with fault tolerance (each rank's
//    partition replicated into the other's memory every step) against without, --buddy-steps
//    timed steps after 2 of warm-up, in alternating order, --repeat times; the cost is 1 - the
//    median of (steps/s with) / (steps/s without). Goal: at most 3%.
// 3. Against torchelastic: troupe, and torchrun --max-restarts 1 running the same model with
//    DDP over gloo and a checkpoint every 20 steps (bench/chaos_bench_torchrun.py), each with
//    rank 1 SIGKILLed before step 30: the time from the kill to the next completed step, and the
//    steps run again (the one in flight among them). torchrun is skipped with a message when no
//    python here imports torch (bench/setup_torch_peers.sh).
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "actors/step_clock.h"
#include "bench/bench_fail.h"
#include "bench/bench_shapes.h"
#include "bench/bench_util.h"
#include "core/cluster/cluster.h"
#include "core/cluster/local_cluster.h"
#include "trainers/config.h"
#include "trainers/data_parallel_trainer.h"
#include "trainers/recovery.h"

#ifndef TROUPE_BINARY
#define TROUPE_BINARY "troupe"
#endif
#ifndef TROUPE_CHAOS_BENCH_TORCHRUN_SCRIPT
#define TROUPE_CHAOS_BENCH_TORCHRUN_SCRIPT "bench/chaos_bench_torchrun.py"
#endif

namespace troupe::bench {
namespace {

trainers::TrainConfig train_config(const Shape& s, int stage, int steps, bool fault_tolerance) {
  trainers::TrainConfig c;
  c.parallel.dp = 2;
  c.zero.stage = stage;
  c.gradient_accumulation_steps = 1;
  c.micro_batch_size = s.B;
  c.train_batch_size = static_cast<int64_t>(s.B) * 2;
  c.model = gpt_config(s);
  c.data.synthetic = trainers::SyntheticTaskConfig{
      .task = "addition", .digits = 3, .num_samples = 4096, .seed = 7};
  c.optimizer.type = trainers::OptimizerType::kAdamW;
  c.optimizer.adamw = {
      .lr = 1e-4f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
  c.lr_schedule = *nn::LrSchedule::warmup_cosine(
      {.base_lr = 1e-4f, .total_num_steps = steps, .warmup_num_steps = 2});
  c.gradient_clipping = 1.0;
  c.zero.reduce_bucket_size = 1572864;
  c.training.seed = 1337;
  c.fault_tolerance = {.enabled = fault_tolerance,
                       .spare_nodes = 1,
                       .max_failures = 4,
                       .wait_for_node_s = 30,
                       .step_timeout_s = 120};
  return c;
}

// What one run gave: each step's samples and end time, the weights, the recoveries.
struct Run {
  std::vector<std::vector<int64_t>> samples;
  std::vector<double> step_end_ms;
  std::vector<double> step_ms;
  std::vector<float> params;
  std::vector<trainers::RecoveryReport> recoveries;
  absl::Status status;
};

struct Kill {
  int64_t step = 0;  // 0: none
  int rank = 0;
  double delay_ms = 0;
};

class Chaos {
 public:
  Chaos(int threads) : threads_(threads) {
    cluster::LocalClusterOptions o;
    o.workers = 3;  // two ranks and a spare
    o.default_resources = "CPU=1";
    o.troupe_binary = TROUPE_BINARY;
    o.echo_output = std::getenv("ECHO") != nullptr;  // the workers' logs, for a stall
    ::setenv("OMP_NUM_THREADS", std::to_string(threads).c_str(), 1);
    local_ = value_or_die(cluster::LocalCluster::start(o), "starting the local cluster");
    driver_ = value_or_die(Cluster::connect(local_->client_options()), "connecting the driver");
  }
  ~Chaos() {
    driver_.reset();
    local_.reset();
    ::unsetenv("OMP_NUM_THREADS");
  }

  // Runs `steps` steps of `config`, carrying out `kill`; the kill's time in *killed_ms.
  Run run(const trainers::TrainConfig& config, int steps, const Kill& kill, double* killed_ms) {
    Run out;
    auto trainer = value_or_die(trainers::DataParallelTrainer::start(
                                    *driver_, config, "chaos-" + std::to_string(++jobs_), threads_),
                                "starting the trainer");
    trainers::RecoveringStepper stepper(*trainer, nullptr, config.fault_tolerance);
    for (int64_t k = 1; k <= steps; ++k) {
      std::thread killer;
      if (kill.step == k) {
        const int victim = worker_of(*trainer, kill.rank);
        killer = std::thread([this, victim, kill, killed_ms] {
          std::this_thread::sleep_for(
              std::chrono::microseconds(static_cast<int64_t>(kill.delay_ms * 1000)));
          *killed_ms = actors::now_ms();
          local_->kill_worker(victim, SIGKILL);
        });
      }
      absl::StatusOr<trainers::StepOutcome> outcome =
          stepper.step(k, [this](const trainers::RecoveryReport&) {
            // A spare again for the next trial (from this thread, which outlives it).
            if (absl::StatusOr<int> added = local_->add_worker("CPU=1"); !added.ok()) {
              std::fprintf(stderr, "chaos_bench: adding a worker: %s\n",
                           added.status().ToString().c_str());
            }
          });
      const double end_ms = actors::now_ms();
      if (killer.joinable()) killer.join();
      if (!outcome.ok()) {
        out.status = outcome.status();
        break;
      }
      out.samples.push_back(outcome->sample_ids);
      out.step_end_ms.push_back(end_ms);
      out.step_ms.push_back(outcome->step_ms);
    }
    out.recoveries = stepper.recoveries();
    if (out.status.ok()) {
      absl::StatusOr<std::vector<float>> params = trainer->master_params();
      if (params.ok()) {
        out.params = *std::move(params);
      } else {
        out.status = params.status();
      }
    }
    trainer->stop().IgnoreError();
    return out;
  }

 private:
  int worker_of(trainers::DataParallelTrainer& trainer, int rank) {
    cluster::ClusterStatus status = value_or_die(driver_->status(), "reading the cluster status");
    const uint64_t stage = trainer.rank_actors(rank)[1].value;
    for (const cluster::ActorStatus& a : status.actors) {
      if (a.id != stage) continue;
      for (int i = 0; i < local_->num_workers(); ++i) {
        if (local_->worker_node(i) == a.node) return i;
      }
    }
    die("no worker hosts rank " + std::to_string(rank));
  }

  int threads_;
  int jobs_ = 0;
  std::unique_ptr<cluster::LocalCluster> local_;
  std::unique_ptr<Cluster> driver_;
};

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t at = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())));
  return v[at];
}

struct TrialTimes {
  double kill_to_commit = 0, detect = 0, replace = 0, restore = 0, resume = 0;
};

// The lines "STEP TIME ATTEMPT" of the torchrun peer's steps.log.
struct LoggedStep {
  int64_t step = 0;
  double time = 0;
  int attempt = 0;
};

std::vector<LoggedStep> read_steps(const std::string& path) {
  std::vector<LoggedStep> out;
  std::ifstream in(path);
  LoggedStep s;
  while (in >> s.step >> s.time >> s.attempt)
    out.push_back(s);
  return out;
}

// Runs troupe and torchrun (--max-restarts 1, a checkpoint every `every` steps) through a kill
// of rank 1 at step `kill_step`, prints both, and returns the kill-to-next-step row (seconds;
// the peer's column is torchrun's). Adds the steps-run-again row to `rows`. A torchrun that
// has not finished within `peer_timeout_s` is killed and reported as failed (a restarted
// rendezvous has been seen to hang), so that the bench ends within its own budget.
Row against_torchrun(Chaos& chaos, const Shape& shape, int stage, int kill_step, int every,
                     int threads, int peer_timeout_s, std::vector<Row>* rows) {
  Row row{.name = "kill to next completed step", .unit = "s, lower is better"};
  const int steps = kill_step + 2;
  double killed_ms = 0;
  const troupe::trainers::TrainConfig config = train_config(shape, stage, steps, true);
  const Run run = chaos.run(config, steps, {.step = kill_step, .rank = 1}, &killed_ms);
  if (!run.status.ok() || run.recoveries.empty())
    die("troupe's side failed: " + run.status.ToString());
  int64_t troupe_lost = 0;
  for (const auto& r : run.recoveries)
    troupe_lost += r.steps_lost;
  const double recovered_ms = run.recoveries[0].started_ms + run.recoveries[0].total_ms;
  for (double end : run.step_end_ms) {
    if (end > killed_ms && end >= recovered_ms) {
      row.troupe = (end - killed_ms) / 1000;
      break;
    }
  }
  std::printf(
      "\ntroupe: rank 1 killed before step %d: next step committed %.2f s after the kill, %lld "
      "step%s run again\n",
      kill_step, row.troupe, static_cast<long long>(troupe_lost), troupe_lost == 1 ? "" : "s");
  std::optional<std::string> python = find_torch_python();
  if (!python) {
    std::printf("torchrun: skipped (no python here imports torch; bench/setup_torch_peers.sh)\n");
    rows->push_back({.name = "steps run again", .unit = "steps", .troupe = double(troupe_lost)});
    return row;
  }
  std::string dir = (std::filesystem::temp_directory_path() / "chaos-torchrun-XXXXXX").string();
  if (::mkdtemp(dir.data()) == nullptr) die("mkdtemp");
  const std::string config_arg =
      absl::StrCat(shape.L, ":", shape.C, ":", shape.NH, ":", shape.V, ":", shape.T, ":", shape.B);
  const std::string command = absl::StrCat(
      "cd ", shell_quote(dir), " && OMP_NUM_THREADS=", threads, " timeout -k 10 ", peer_timeout_s,
      " ", shell_quote(*python), " -m torch.distributed.run --nproc-per-node 2 --max-restarts 1",
      " --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:", 20000 + ::getpid() % 20000, " ",
      shell_quote(TROUPE_CHAOS_BENCH_TORCHRUN_SCRIPT), " --config ", config_arg, " --steps ", steps,
      " --kill-step ", kill_step, " --checkpoint-every ", every, " --dir ", shell_quote(dir),
      " --threads ", threads, " > ", shell_quote(dir + "/torchrun.log"), " 2>&1");
  const int rc = std::system(command.c_str());
  std::ifstream killed_file(dir + "/killed");
  double killed = 0;
  killed_file >> killed;
  const std::vector<LoggedStep> logged = read_steps(dir + "/steps.log");
  double next = 0;
  int64_t recomputed = 0;
  for (const LoggedStep& s : logged) {
    if (s.attempt == 0) continue;
    if (next == 0) next = s.time;
    if (s.step <= kill_step) ++recomputed;  // as troupe's count: with the one in flight
  }
  if (rc != 0 || killed == 0 || next == 0) {
    std::printf("torchrun: failed (exit status %d); its output is in %s/torchrun.log\n", rc,
                dir.c_str());
    rows->push_back({.name = "steps run again", .unit = "steps", .troupe = double(troupe_lost)});
    return row;
  }
  row.peer = next - killed;
  std::printf(
      "torchrun --max-restarts 1: next step done %.2f s after the kill, %lld steps run again "
      "(from its checkpoint of step %d)\n",
      row.peer, static_cast<long long>(recomputed), (kill_step - 1) / every * every);
  std::printf("troupe is back %.1fx sooner and runs %lld step%s again against %lld\n",
              row.peer / row.troupe, static_cast<long long>(troupe_lost),
              troupe_lost == 1 ? "" : "s", static_cast<long long>(recomputed));
  rows->push_back({.name = "steps run again",
                   .unit = "steps",
                   .troupe = double(troupe_lost),
                   .peer = double(recomputed)});
  std::filesystem::remove_all(dir);
  return row;
}

}  // namespace
}  // namespace troupe::bench

int main(int argc, char** argv) {
  using namespace troupe::bench;
  // A line at a time even into a pipe (CI's log): a run stopped by a timeout shows how far it got.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const Flags flags(argc, argv);
  const bool tiny = flags.has("--tiny");
  const Shape shape = tiny ? kTiny : kMedium;
  const int trials = static_cast<int>(flags.get_long("--trials", tiny ? 3 : 30));
  const int steps = static_cast<int>(flags.get_long("--steps", tiny ? 6 : 8));
  const int stage = static_cast<int>(flags.get_long("--zero", 0));
  const int threads = static_cast<int>(flags.get_long("--threads", 1));
  const int buddy_steps = static_cast<int>(flags.get_long("--buddy-steps", tiny ? 3 : 10));
  const int repeat = static_cast<int>(flags.get_long("--repeat", tiny ? 1 : 3));
  std::mt19937 rng(static_cast<uint32_t>(flags.get_long("--seed", 1)));
  if (steps < 3 || trials < 1 || stage < 0 || stage > 3)
    die("--steps >= 3, --trials >= 1, --zero 0-3");

  Chaos chaos(threads);
  const troupe::trainers::TrainConfig config = train_config(shape, stage, steps, true);
  std::printf("chaos_bench: GPT %d x %d, %s over dp 2 (+1 spare), %d steps a run, %d trials\n",
              shape.L, shape.C, stage == 0 ? "DDP" : ("ZeRO-" + std::to_string(stage)).c_str(),
              steps, trials);
  double ignored = 0;
  const Run reference = chaos.run(config, steps, {}, &ignored);
  if (!reference.status.ok()) die("the reference run failed: " + reference.status.ToString());
  const double step_ms = median(reference.step_ms);
  std::printf("reference run: %.0f ms a step (median)\n", step_ms);

  std::uniform_int_distribution<int> step_of(2, steps - 1);
  std::uniform_int_distribution<int> rank_of(0, 1);
  std::uniform_real_distribution<double> delay_of(0, 1.2 * step_ms);
  int succeeded = 0;
  int64_t most_lost = 0;
  std::vector<TrialTimes> times;
  for (int t = 0; t < trials; ++t) {
    const Kill kill{.step = step_of(rng), .rank = rank_of(rng), .delay_ms = delay_of(rng)};
    double killed_ms = 0;
    const Run run = chaos.run(config, steps, kill, &killed_ms);
    const bool bitwise = run.status.ok() && run.params.size() == reference.params.size() &&
                         std::memcmp(run.params.data(), reference.params.data(),
                                     reference.params.size() * sizeof(float)) == 0 &&
                         run.samples == reference.samples;
    succeeded += bitwise ? 1 : 0;
    int64_t lost = 0;
    for (const auto& r : run.recoveries)
      lost += r.steps_lost;
    most_lost = std::max(most_lost, lost);
    std::string what = run.status.ok() ? (bitwise ? "bitwise equal" : "DIFFERENT")
                                       : "FAILED: " + run.status.ToString();
    if (!run.recoveries.empty() && killed_ms > 0) {
      const troupe::trainers::RecoveryReport& r = run.recoveries.front();
      // The next step committed after the kill and the recovery (a step
      // may still commit after the signal, before the process is gone).
      double committed = 0;
      for (double end : run.step_end_ms) {
        if (end > killed_ms && end >= r.started_ms + r.total_ms) {
          committed = end;
          break;
        }
      }
      TrialTimes tt;
      tt.kill_to_commit = committed - killed_ms;
      tt.detect = r.started_ms + r.detect_ms - killed_ms;
      tt.replace = r.replace_ms;
      tt.restore = r.restore_ms;
      tt.resume = committed - (r.started_ms + r.total_ms);
      times.push_back(tt);
      std::printf(
          "trial %2d: kill d%d at step %lld +%.0f ms: %s; kill to next commit %.0f ms (detect "
          "%.0f, "
          "replace %.0f, restore %.0f, resume %.0f), %lld step%s lost\n",
          t + 1, kill.rank, static_cast<long long>(kill.step), kill.delay_ms, what.c_str(),
          tt.kill_to_commit, tt.detect, tt.replace, tt.restore, tt.resume,
          static_cast<long long>(lost), lost == 1 ? "" : "s");
    } else {
      std::printf("trial %2d: kill d%d at step %lld +%.0f ms: %s; no recovery (%zu)\n", t + 1,
                  kill.rank, static_cast<long long>(kill.step), kill.delay_ms, what.c_str(),
                  run.recoveries.size());
    }
    std::fflush(stdout);
  }
  auto column = [&](double TrialTimes::*field) {
    std::vector<double> v;
    for (const TrialTimes& tt : times)
      v.push_back(tt.*field);
    return v;
  };
  std::printf(
      "\n%d of %d trials bitwise equal to the run without failures (%.0f%%); at most %lld step%s "
      "lost in a trial\n",
      succeeded, trials, 100.0 * succeeded / trials, static_cast<long long>(most_lost),
      most_lost == 1 ? "" : "s");
  std::printf("%-22s %10s %10s\n", "(ms)", "median", "p90");
  const std::vector<std::pair<const char*, double TrialTimes::*>> parts = {
      {"kill to next commit", &TrialTimes::kill_to_commit},
      {"  detect", &TrialTimes::detect},
      {"  replace", &TrialTimes::replace},
      {"  restore", &TrialTimes::restore},
      {"  resume (step re-run)", &TrialTimes::resume}};
  std::vector<Row> rows;
  for (const auto& [name, field] : parts) {
    std::vector<double> v = column(field);
    std::printf("%-22s %10.0f %10.0f\n", name, median(v), percentile(v, 0.9));
    rows.push_back({.name = name, .unit = "ms", .troupe = median(v), .peer = 0});
  }
  rows.push_back({.name = "bitwise trials", .unit = "%", .troupe = 100.0 * succeeded / trials});
  const bool all_bitwise = succeeded == trials;

  if (!flags.has("--skip-buddy")) {
    // Buddy replication's cost: ZeRO-3 with fault tolerance against without.
    std::vector<double> ratios;
    double with_ms = 0, without_ms = 0;
    for (int r = 0; r < repeat; ++r) {
      for (bool ft : {r % 2 == 0, r % 2 != 0}) {
        const troupe::trainers::TrainConfig c = train_config(shape, 3, buddy_steps + 2, ft);
        const Run run = chaos.run(c, buddy_steps + 2, {}, &ignored);
        if (!run.status.ok()) die("a ZeRO-3 run failed: " + run.status.ToString());
        const double ms = median(std::vector<double>(run.step_ms.begin() + 2, run.step_ms.end()));
        (ft ? with_ms : without_ms) = ms;
      }
      ratios.push_back(without_ms / with_ms);
      std::printf("ZeRO-3 round %d: %.1f ms a step with buddy replication, %.1f ms without\n",
                  r + 1, with_ms, without_ms);
    }
    const double cost = 1 - median(ratios);
    std::printf("buddy replication costs %.1f%% of ZeRO-3's step time (median of %d rounds)\n",
                100 * cost, repeat);
    rows.push_back({.name = "buddy replication cost", .unit = "%", .troupe = 100 * cost});
  }
  if (!flags.has("--skip-peers")) {
    // Side by side with torchelastic: the same model, a rank SIGKILLed at the same step.
    const int kill_step = tiny ? 5 : 30;
    const int every = tiny ? 2 : 20;
    // CI's smoke run has 600 s in all.
    const int peer_timeout_s = tiny ? 180 : 900;
    rows.push_back(
        against_torchrun(chaos, shape, stage, kill_step, every, threads, peer_timeout_s, &rows));
  }
  if (const std::string json = flags.get("--json", ""); !json.empty()) {
    if (!write_json(json, "chaos_bench", "", rows)) die("cannot write " + json);
  }
  return all_bitwise ? 0 : 1;
}
