// pipeline_bench: pipeline parallelism's bubble and throughput (docs/parallelism.md).
//
//   pipeline_bench [--stages 2,4] [--micro-batches 4,8,16] [--schedules gpipe,1f1b,interleaved]
//                  [--steps 4] [--warmup 1] [--repeat 3] [--threads 1] [--tiny] [--skip-peer]
//
// For each schedule, p stages and m micro-batches a step: troupe's HybridTrainer (dp 1, pp p)
// on a local cluster of p workers (one stage each, --threads compute threads), --warmup steps,
// then --steps timed steps, --repeat times. Printed per row, medians over the repeats of each
// run's median step: the measured bubble (the stages' idle share of the schedule, from their
// timelines: trainers/step_reports.h) beside the theory, (p - 1) / (m + p - 1) (interleaved
// 1F1B with v = 2 chunks a stage: (p - 1) / (v m + p - 1)), and the difference in points;
// samples/s; and the activations the busiest stage holds, with the micro-batch chunks its
// schedule keeps in flight on the first stage (1F1B: p, GPipe: m).
//
// The model: 8 blocks of 256 channels, 4 heads, sequence 128, a vocabulary of 256 (so that the
// head on the last stage costs about what a block does and the stages balance), micro-batch 4;
// --tiny: 4 blocks of 32 channels, for CI's smoke run.
//
// The peer, in the same invocation: torch.distributed.pipelining's ScheduleGPipe,
// Schedule1F1B and ScheduleInterleaved1F1B over gloo, on the same model split the same way, the
// same micro-batches and threads (bench/pipeline_bench_torch.py, with the python bench_util.h's
// find_torch_python finds; bench/setup_torch_peers.sh installs torch). Its samples/s, median of
// --repeat runs, and troupe's ratio to it. Skipped, saying so, when no python here imports torch.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "actors/pipeline/schedule.h"
#include "bench/bench_fail.h"
#include "bench/bench_util.h"
#include "bench/compute_env.h"
#include "core/cluster/cluster.h"
#include "core/cluster/local_cluster.h"
#include "nn/memory.h"
#include "trainers/config.h"
#include "trainers/trainer.h"

#ifndef TROUPE_BINARY
#define TROUPE_BINARY "troupe"
#endif
#ifndef TROUPE_PIPELINE_BENCH_PEER_SCRIPT
#define TROUPE_PIPELINE_BENCH_PEER_SCRIPT "bench/pipeline_bench_torch.py"
#endif

namespace troupe::bench {
namespace {

struct Shape {
  int L, C, NH, T, V, B;
};
constexpr Shape kPipelineShape = {8, 256, 4, 128, 256, 4};
constexpr Shape kTinyShape = {4, 32, 2, 16, 64, 2};
// Interleaved 1F1B: the model chunks a stage holds (Megatron's virtual
// pipeline size).
constexpr int kChunks = 2;

trainers::TrainConfig config_for(const Shape& s, const std::string& schedule, int p, int m) {
  trainers::TrainConfig c;
  c.parallel.dp = 1;
  c.parallel.pp = p;
  c.parallel.schedule = *actors::pipeline::parse_schedule(schedule);
  c.parallel.virtual_stages = schedule == "interleaved" ? kChunks : 1;
  c.micro_batch_size = s.B;
  c.gradient_accumulation_steps = m;
  c.train_batch_size = static_cast<int64_t>(s.B) * m;
  c.model = nn::GPTConfig{.max_seq_len = s.T,
                          .vocab_size = s.V,
                          .padded_vocab_size = s.V,
                          .num_layers = s.L,
                          .num_heads = s.NH,
                          .channels = s.C};
  c.data.synthetic = trainers::SyntheticTaskConfig{
      .task = "addition", .digits = 2, .num_samples = 4096, .seed = 7};
  c.optimizer.type = trainers::OptimizerType::kAdamW;
  c.lr_schedule = nn::LrSchedule::constant(1e-4f);
  c.gradient_clipping = 1.0;
  c.training.seed = 1337;
  return c;
}

struct Measured {
  double bubble = 0;
  double samples_per_s = 0;
  double activations = 0;  // bytes, the busiest stage's
};

Measured run_once(Cluster& driver, const trainers::TrainConfig& config, int threads, int steps,
                  int warmup, const std::string& job) {
  const std::string what = job + ": ";
  std::unique_ptr<trainers::Trainer> trainer = value_or_die(
      trainers::start_trainer(driver, config, job, threads), what + "starting the trainer");
  std::vector<double> bubbles, step_ms;
  Measured out;
  for (int k = 1; k <= warmup + steps; ++k) {
    trainers::StepOutcome o = value_or_die(trainer->step(k), what + "step " + std::to_string(k));
    out.activations = std::max(out.activations, static_cast<double>(o.memory.activations));
    if (k <= warmup) continue;
    bubbles.push_back(o.bubble);
    step_ms.push_back(o.step_ms);
  }
  if (absl::Status s = trainer->stop(); !s.ok()) die(what + "stop: " + s.ToString());
  out.bubble = median(bubbles);
  out.samples_per_s = static_cast<double>(config.train_batch_size) / (median(step_ms) / 1e3);
  return out;
}

// The peer's samples/s for one row, or a reason it has none.
struct PeerRun {
  double samples_per_s = 0;
  std::string why;
};

PeerRun run_peer(const std::string& python, const Shape& s, const std::string& schedule, int p,
                 int m, int threads, int steps, int warmup) {
  constexpr int kTimeoutS = 900;
  const std::string cmd =
      "timeout -k 10 " + std::to_string(kTimeoutS + 60) + " " + shell_quote(python) + " " +
      shell_quote(TROUPE_PIPELINE_BENCH_PEER_SCRIPT) + " --schedule " + schedule + " --stages " +
      std::to_string(p) + " --micro-batches " + std::to_string(m) + " --config " +
      std::to_string(s.L) + ":" + std::to_string(s.C) + ":" + std::to_string(s.NH) + ":" +
      std::to_string(s.V) + ":" + std::to_string(s.T) + ":" + std::to_string(s.B) + " --threads " +
      std::to_string(threads) + " --steps " + std::to_string(steps) + " --warmup " +
      std::to_string(warmup) + " --timeout " + std::to_string(kTimeoutS) + " --parent-pid " +
      std::to_string(::getpid()) + " 2>&1";
  std::fflush(stdout);
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) return {.samples_per_s = 0, .why = "cannot start " + python};
  const std::string out = read_all(pipe);
  ::pclose(pipe);
  const std::string marker = "PIPELINE_PEER_RESULT ";
  const size_t at = out.rfind(marker);
  if (at == std::string::npos) {
    return {.samples_per_s = 0, .why = out.substr(out.size() > 400 ? out.size() - 400 : 0)};
  }
  const std::optional<double> rate = json_number(out.substr(at + marker.size()), "samples_per_s");
  if (!rate) return {.samples_per_s = 0, .why = "no samples_per_s in its result"};
  return {.samples_per_s = *rate, .why = ""};
}

}  // namespace
}  // namespace troupe::bench

using namespace troupe;
using namespace troupe::bench;

int main(int argc, char** argv) {
  Flags flags(argc, argv);
  if (flags.has("--help")) {
    std::printf(
        "pipeline_bench [--stages 2,4] [--micro-batches 4,8,16]\n"
        "               [--schedules gpipe,1f1b,interleaved]\n"
        "               [--steps 4] [--warmup 1] [--repeat 3] [--threads 1] [--tiny]\n"
        "               [--skip-peer]\n");
    return 0;
  }
  reexec_keeping_peer_wait_policy(argv);  // bench/compute_env.h
  const bool tiny = flags.has("--tiny");
  const std::vector<int> stages = parse_int_list(flags.get("--stages", tiny ? "2" : "2,4"));
  const std::vector<int> micro =
      parse_int_list(flags.get("--micro-batches", tiny ? "4" : "4,8,16"));
  const std::vector<std::string> schedules =
      parse_name_list(flags.get("--schedules", "gpipe,1f1b,interleaved"));
  const int steps = static_cast<int>(flags.get_long("--steps", tiny ? 1 : 4));
  const int warmup = static_cast<int>(flags.get_long("--warmup", 1));
  const int repeat = static_cast<int>(flags.get_long("--repeat", tiny ? 1 : 3));
  const int threads = static_cast<int>(flags.get_long("--threads", 1));
  const Shape shape = tiny ? kTinyShape : kPipelineShape;
  const bool skip_peer = flags.has("--skip-peer");
  auto bad = [&](int v, int lo, int hi) { return v < lo || v > hi; };
  if (stages.empty() || micro.empty() || schedules.empty() || bad(steps, 1, 1000) ||
      bad(warmup, 0, 100) || bad(repeat, 1, 100) || bad(threads, 1, 64) ||
      std::any_of(stages.begin(), stages.end(), [&](int p) { return bad(p, 2, shape.L); }) ||
      std::any_of(micro.begin(), micro.end(), [&](int m) { return bad(m, 1, 256); }) ||
      std::any_of(schedules.begin(), schedules.end(), [](const std::string& name) {
        return !actors::pipeline::parse_schedule(name).has_value();
      })) {
    std::fprintf(stderr, "pipeline_bench: bad arguments (see --help)\n");
    return 2;
  }
  const int workers = *std::max_element(stages.begin(), stages.end());
  std::unique_ptr<cluster::LocalCluster> local =
      value_or_die(cluster::LocalCluster::start({.workers = workers,
                                                 .default_resources = "CPU=1",
                                                 .troupe_binary = TROUPE_BINARY,
                                                 .echo_output = false}),
                   "starting the local cluster");
  std::unique_ptr<Cluster> driver =
      value_or_die(Cluster::connect(local->client_options()), "connecting the driver");
  std::printf(
      "pipeline_bench: GPT of %d blocks x %d channels, seq %d, vocab %d, micro-batch %d; dp 1, "
      "one stage a worker, %d thread(s) each; %d timed step(s) after %d warm-up, median of %d\n",
      shape.L, shape.C, shape.T, shape.V, shape.B, threads, steps, warmup, repeat);
  std::optional<std::string> python;
  if (skip_peer) {
    std::printf("peer (torch.distributed.pipelining): skipped (--skip-peer)\n");
  } else if (python = find_torch_python(); !python) {
    std::printf(
        "peer (torch.distributed.pipelining): skipped, no python here imports torch "
        "(bench/setup_torch_peers.sh installs it)\n");
  }
  std::printf("%-11s %2s %3s  %9s %8s %7s  %10s %10s %6s  %12s %5s\n", "schedule", "p", "m",
              "bubble", "theory", "diff", "samples/s", "torch", "ratio", "activations", "held");
  int jobs = 0;
  for (const std::string& schedule : schedules) {
    for (int p : stages) {
      for (int m : micro) {
        const trainers::TrainConfig config = config_for(shape, schedule, p, m);
        std::vector<double> bubble, rate, peer_rate;
        double activations = 0;
        for (int r = 0; r < repeat; ++r) {
          const Measured one = run_once(*driver, config, threads, steps, warmup,
                                        "pipeline-bench-" + std::to_string(++jobs));
          bubble.push_back(one.bubble);
          rate.push_back(one.samples_per_s);
          activations = std::max(activations, one.activations);
          if (!python) continue;
          const PeerRun peer = run_peer(*python, shape, schedule, p, m, threads, steps, warmup);
          if (peer.samples_per_s > 0) {
            peer_rate.push_back(peer.samples_per_s);
          } else {
            std::printf("  peer failed: %s\n", peer.why.c_str());
          }
        }
        const double peer = peer_rate.empty() ? 0 : median(peer_rate);
        const int chunks = config.parallel.virtual_stages;
        const double theory = actors::pipeline::theoretical_bubble(p, m, chunks);
        // The micro-batch chunks its first stage holds at most (its chunks' activations).
        actors::pipeline::ScheduleRun simulated;
        const actors::pipeline::Schedule made =
            value_or_die(actors::pipeline::make_schedule(config.parallel.schedule, p, m, chunks),
                         "the schedule");
        if (absl::Status s = actors::pipeline::check_schedule(made, &simulated); !s.ok())
          die(s.ToString());
        const int held = simulated.held_max[0];
        const std::string peer_text = peer > 0 ? absl::StrFormat("%10.1f", peer) : "         -";
        const std::string ratio_text =
            peer > 0 ? absl::StrFormat("%5.2fx", median(rate) / peer) : "     -";
        std::printf("%-11s %2d %3d  %8.1f%% %7.1f%% %+6.1f  %10.1f %s %s  %12s %5d\n",
                    schedule.c_str(), p, m, 100 * median(bubble), 100 * theory,
                    100 * (median(bubble) - theory), median(rate), peer_text.c_str(),
                    ratio_text.c_str(), nn::format_bytes(static_cast<int64_t>(activations)).c_str(),
                    held);
        std::fflush(stdout);
      }
    }
  }
  driver.reset();  // before the cluster it is connected to
  return 0;
}
