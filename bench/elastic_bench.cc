// Elastic benchmark: how long a running training job takes to use a node that joins.
//
//   elastic_bench [--trials 5] [--join-step 4] [--threads 1] [--seed 1] [--zero 0|1]
//                 [--tiny] [--skip-peers] [--json FILE]
//
// The model is ddp_bench's medium config (a GPT of 6 layers x 384, 6 heads, seq 256, vocab
// 4096: 12.3M parameters), AdamW, a global batch of 8 sequences; --tiny: CI's smoke size.
//
// 1. troupe. Each trial starts a job with elasticity enabled at dp 1 on a local cluster of one
//    worker (one CPU), trains --join-step steps, then starts a second worker process at a
//    random moment of the next step, while the job goes on training. The job grows to dp 2 at the
//    next step boundary (ElasticScaler, as `troupe train` does): the new rank's actors are spawned
//    on the new node, take the committed state from rank 0 peer to peer, and every loader continues
//    at the global cursor with micro-batch 4 instead of 8. Reported (median over trials): the time
//    from starting the worker to the first step committed at dp 2, split into join (until the
//    worker has registered with the head), notice (until the job's driver decided to grow: the
//    head's event reaches it with a heartbeat, and the step in flight ends), resize (the resize
//    itself) and first step (the step at dp 2); and the steps run again (none: no step is
//    lost). Goal: at most 2 s from the join to the first step at the new size. With --zero 1
//    the job is ZeRO-1: the new rank fetches its half of the optimizer state from rank 0, and
//    rank 0 keeps the other half; each then keeps a replica of the other's partition.
//    (ZeRO-2/3 do not grow from dp 1: docs/elasticity.md.)
// 2. torchrun. The same model and global batch under torchrun --nnodes=1:2 with DDP over gloo
//    and a checkpoint every 10 steps (bench/elastic_bench_torchrun.py): node A trains alone,
//    node B is started after --join-step steps, and torchelastic restarts both workers at world
//    size 2 from the last checkpoint. Reported: the time from starting B to the first step
//    completed at world size 2, and the steps run again. Skipped with a message when no python
//    here imports torch (bench/setup_torch_peers.sh).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
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
#include "trainers/elastic_scaler.h"

#ifndef TROUPE_BINARY
#define TROUPE_BINARY "troupe"
#endif
#ifndef TROUPE_ELASTIC_BENCH_TORCHRUN_SCRIPT
#define TROUPE_ELASTIC_BENCH_TORCHRUN_SCRIPT "bench/elastic_bench_torchrun.py"
#endif

namespace troupe::bench {
namespace {

constexpr int kGlobalBatch = 8;
// The most a trial waits for the job to grow, and the peer's whole run.
constexpr double kGrowWaitMs = 120'000;
constexpr int kPeerTimeoutS = 900;
constexpr int64_t kMaxSteps = 100'000;  // a trial's steps at the most (tiny ones are fast)

trainers::TrainConfig train_config(const Shape& s, int zero_stage) {
  trainers::TrainConfig c;
  c.zero.stage = zero_stage;
  c.parallel.dp = 1;
  c.gradient_accumulation_steps = 1;
  c.micro_batch_size = kGlobalBatch;
  c.train_batch_size = kGlobalBatch;
  c.model = gpt_config(s);
  c.data.synthetic = trainers::SyntheticTaskConfig{
      .task = "addition", .digits = 3, .num_samples = 4096, .seed = 7};
  c.optimizer.type = trainers::OptimizerType::kAdamW;
  c.optimizer.adamw = {
      .lr = 1e-4f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
  c.lr_schedule = nn::LrSchedule::constant(1e-4f);
  c.gradient_clipping = 1.0;
  c.zero.reduce_bucket_size = 1572864;
  c.training.seed = 1337;
  c.elasticity = {.enabled = true, .min_dp = 1, .max_dp = 2, .micro_batch_sizes = {}};
  return c;
}

struct Trial {
  double total_ms = 0;  // worker started -> first step committed at dp 2
  double join_ms = 0, notice_ms = 0, resize_ms = 0, first_step_ms = 0;
  double spawn_ms = 0, state_ms = 0, group_ms = 0;  // the resize's parts
  double into_step_ms = 0;                          // how far into a step the worker was started
  int64_t steps_at_dp1 = 0;                         // committed while the worker joined
};

// One trial: a dp-1 job, a worker joining after `join_step` steps, until the first step at dp 2.
Trial run_trial(cluster::LocalCluster& local, Cluster& driver, const trainers::TrainConfig& config,
                int join_step, int threads, int trial, std::mt19937& rng) {
  auto trainer = value_or_die(trainers::DataParallelTrainer::start(
                                  driver, config, absl::StrCat("elastic-", trial), threads),
                              "starting the trainer");
  trainers::ElasticScaler scaler(driver, *trainer, config);
  Trial t;
  // The worker is started from a thread of its own that lives until the trial ends (a worker
  // dies with the thread that started it).
  std::atomic<double> started_ms{0}, joined_ms{0};
  std::promise<void> done;
  std::shared_future<void> trial_over = done.get_future().share();
  std::thread joiner;
  std::atomic<int> worker{-1};
  double decided_ms = 0, last_step_ms = 0;
  for (int64_t k = 1;; ++k) {
    if (k == join_step + 1) {
      // At a random moment of the step, as a machine joins.
      t.into_step_ms = std::uniform_real_distribution<double>(0, last_step_ms)(rng);
      joiner = std::thread([&] {
        std::this_thread::sleep_for(
            std::chrono::microseconds(static_cast<int64_t>(t.into_step_ms * 1000)));
        started_ms = actors::now_ms();
        absl::StatusOr<int> added = local.add_worker("CPU=1");
        if (!added.ok()) die("adding a worker: " + added.status().ToString());
        worker = *added;
        joined_ms = actors::now_ms();
        trial_over.wait();
      });
    }
    absl::StatusOr<std::optional<trainers::ResizeReport>> resized = scaler.before_step(k);
    if (!resized.ok()) die("resizing: " + resized.status().ToString());
    if (*resized) {
      decided_ms = actors::now_ms() - (*resized)->ms;
      t.resize_ms = (*resized)->ms;
      t.spawn_ms = trainer->last_resize().spawn_ms;
      t.state_ms = trainer->last_resize().state_ms;
      t.group_ms = trainer->last_resize().group_ms;
    }
    const double step_start = actors::now_ms();
    absl::StatusOr<trainers::StepOutcome> outcome = trainer->step(k);
    if (!outcome.ok()) die(absl::StrCat("step ", k, ": ", outcome.status().ToString()));
    const double end = actors::now_ms();
    last_step_ms = end - step_start;
    if (outcome->dp == 2) {
      t.total_ms = end - started_ms;
      t.join_ms = joined_ms - started_ms;
      t.notice_ms = decided_ms - joined_ms;
      t.first_step_ms = end - step_start;
      break;
    }
    if (started_ms > 0) ++t.steps_at_dp1;
    if ((started_ms > 0 && end - started_ms > kGrowWaitMs) || k > kMaxSteps) {
      die("the job did not grow in time");
    }
  }
  trainer->stop().IgnoreError();
  done.set_value();
  joiner.join();  // (after which LocalCluster is this thread's alone again)
  local.kill_worker(worker.load(), SIGTERM);
  return t;
}

// "STEP TIME WORLD ATTEMPT" lines of the torchrun peer's steps.log.
struct LoggedStep {
  int64_t step = 0;
  double time = 0;
  int world = 0;
  int attempt = 0;
};

std::vector<LoggedStep> read_steps(const std::string& path) {
  std::vector<LoggedStep> out;
  std::ifstream in(path);
  LoggedStep s;
  while (in >> s.step >> s.time >> s.world >> s.attempt)
    out.push_back(s);
  return out;
}

pid_t start_shell(const std::string& command) {
  const pid_t pid = ::fork();
  if (pid < 0) die("fork");
  if (pid == 0) {
    ::execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return pid;
}

int wait_exit(pid_t pid) {
  int status = 0;
  if (::waitpid(pid, &status, 0) < 0) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// torchrun --nnodes=1:2: node A alone, node B started after `join_step` steps. The time from
// B's start to the first step at world size 2, and the steps run again; nullopt if it failed.
std::optional<std::pair<double, int64_t>> run_torchrun(const std::string& python,
                                                       const Shape& shape, int join_step, int steps,
                                                       int every, int threads, double step_delay) {
  char dir_template[] = "/tmp/elastic-torchrun-XXXXXX";
  if (::mkdtemp(dir_template) == nullptr) die("mkdtemp");
  const std::string dir = dir_template;
  const int port = 20000 + ::getpid() % 20000;
  auto node = [&](const char* name) {
    return absl::StrCat(
        "cd ", shell_quote(dir),
        " && TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 OMP_NUM_THREADS=", threads, " timeout ",
        kPeerTimeoutS, " ", shell_quote(python),
        " -m torch.distributed.run --nnodes=1:2 --nproc-per-node 1 --max-restarts 3",
        " --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:", port, " --rdzv-id elastic-bench-", port,
        " --rdzv-conf last_call_timeout=1 ", shell_quote(TROUPE_ELASTIC_BENCH_TORCHRUN_SCRIPT),
        " --config ", shape.L, ":", shape.C, ":", shape.NH, ":", shape.V, ":", shape.T, ":",
        kGlobalBatch, " --steps ", steps, " --checkpoint-every ", every, " --dir ",
        shell_quote(dir), " --threads ", threads, " --step-delay ", step_delay, " > ",
        shell_quote(dir + "/torchrun-" + name + ".log"), " 2>&1");
  };
  const pid_t a = start_shell(node("a"));
  // B starts once A has completed `join_step` steps (bounded by A's own timeout).
  double b_started = 0;
  pid_t b = -1;
  while (true) {
    if (read_steps(dir + "/steps.log").size() >= static_cast<size_t>(join_step)) {
      b_started = unix_seconds();
      b = start_shell(node("b"));
      break;
    }
    int status = 0;
    if (::waitpid(a, &status, WNOHANG) == a) break;  // A ended before B could join
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const int rc_a = b > 0 ? wait_exit(a) : -1;
  const int rc_b = b > 0 ? wait_exit(b) : -1;
  const std::vector<LoggedStep> logged = read_steps(dir + "/steps.log");
  auto first2 =
      std::find_if(logged.begin(), logged.end(), [](const LoggedStep& s) { return s.world == 2; });
  if (rc_a != 0 || rc_b != 0 || first2 == logged.end()) {
    std::printf("torchrun: failed (exit status %d and %d); its output is in %s\n", rc_a, rc_b,
                dir.c_str());
    return std::nullopt;
  }
  int64_t again = 0;
  for (const LoggedStep& s : logged) {
    if (s.world == 1 && s.step >= first2->step) ++again;
  }
  const double seconds = first2->time - b_started;
  std::filesystem::remove_all(dir);
  return std::make_pair(seconds, again);
}

}  // namespace
}  // namespace troupe::bench

int main(int argc, char** argv) {
  using namespace troupe::bench;
  namespace trainers = troupe::trainers;
  const Flags flags(argc, argv);
  const bool tiny = flags.has("--tiny");
  const Shape shape = tiny ? kTiny : kMedium;
  const int trials = static_cast<int>(flags.get_long("--trials", tiny ? 1 : 5));
  const int join_step = static_cast<int>(flags.get_long("--join-step", tiny ? 2 : 4));
  const int threads = static_cast<int>(flags.get_long("--threads", 1));
  std::mt19937 rng(static_cast<uint32_t>(flags.get_long("--seed", 1)));
  const int zero = static_cast<int>(flags.get_long("--zero", 0));
  if (trials < 1 || join_step < 1 || threads < 1) die("--trials, --join-step, --threads >= 1");
  if (zero != 0 && zero != 1) die("--zero 0 or 1: ZeRO-2/3 do not grow from dp 1");
  ::setenv("OMP_NUM_THREADS", std::to_string(threads).c_str(), 1);

  troupe::cluster::LocalClusterOptions o;
  o.workers = 1;
  o.default_resources = "CPU=1";
  o.troupe_binary = TROUPE_BINARY;
  o.echo_output = std::getenv("ECHO") != nullptr;
  auto local = value_or_die(troupe::cluster::LocalCluster::start(o), "starting the local cluster");
  auto driver =
      value_or_die(troupe::Cluster::connect(local->client_options()), "connecting the driver");
  const trainers::TrainConfig config = train_config(shape, zero);
  std::printf(
      "elastic_bench: GPT %d layers x %d, seq %d, vocab %d; global batch %d; %s; dp 1 -> 2 when "
      "a worker joins after step %d\n",
      shape.L, shape.C, shape.T, shape.V, kGlobalBatch, zero == 0 ? "DDP" : "ZeRO-1", join_step);
  std::vector<Trial> results;
  for (int t = 0; t < trials; ++t) {
    Trial r = run_trial(*local, *driver, config, join_step, threads, t + 1, rng);
    std::printf(
        "trial %d: worker started %.0f ms into a step; to the first step at dp 2: %.0f ms (join "
        "%.0f, notice %.0f, resize %.0f = spawn %.0f + state %.0f + group %.0f, first step "
        "%.0f); %lld steps at dp 1 meanwhile, none run again\n",
        t + 1, r.into_step_ms, r.total_ms, r.join_ms, r.notice_ms, r.resize_ms, r.spawn_ms,
        r.state_ms, r.group_ms, r.first_step_ms, static_cast<long long>(r.steps_at_dp1));
    std::fflush(stdout);
    results.push_back(r);
  }
  auto column = [&](double Trial::*field) {
    std::vector<double> v;
    for (const Trial& r : results)
      v.push_back(r.*field);
    return median(v);
  };
  const double total_s = column(&Trial::total_ms) / 1000;
  std::printf(
      "troupe: %.2f s median from a worker starting to the first step at dp 2 (goal 2 s): join "
      "%.0f ms, notice %.0f ms (the step in flight ends first), resize %.0f ms (spawn %.0f, "
      "state %.0f, group %.0f), first step %.0f ms; 0 steps run again\n",
      total_s, column(&Trial::join_ms), column(&Trial::notice_ms), column(&Trial::resize_ms),
      column(&Trial::spawn_ms), column(&Trial::state_ms), column(&Trial::group_ms),
      column(&Trial::first_step_ms));
  std::vector<Row> rows = {
      {.name = "worker start to first step at the new size", .unit = "s", .troupe = total_s},
      {.name = "steps run again", .unit = "steps", .troupe = 0}};
  driver.reset();
  local.reset();

  if (!flags.has("--skip-peers")) {
    std::optional<std::string> python = find_torch_python();
    if (!python) {
      std::printf("torchrun: skipped (no python here imports torch; bench/setup_torch_peers.sh)\n");
    } else {
      const int every = tiny ? 2 : 10;
      const int steps = join_step + (tiny ? 8 : 12);
      auto peer = run_torchrun(*python, shape, join_step, steps, every, threads, tiny ? 0.3 : 0);
      if (peer) {
        rows[0].peer = peer->first;
        rows[1].peer = static_cast<double>(peer->second);
        std::printf(
            "torchrun --nnodes=1:2: %.2f s from node B starting to the first step at world size "
            "2, %lld steps run again (from its checkpoint every %d steps)\n",
            peer->first, static_cast<long long>(peer->second), every);
        std::printf("troupe uses the new node %.1fx sooner\n", peer->first / total_s);
      }
    }
  }
  print_table("torchrun", rows);
  if (const std::string json = flags.get("--json", ""); !json.empty()) {
    if (!write_json(json, "elastic_bench", "torchrun", rows)) die("cannot write " + json);
  }
  return 0;
}
