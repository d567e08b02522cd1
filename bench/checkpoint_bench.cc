// Checkpoint benchmark: what checkpointing costs a training job, and how fast a checkpoint is
// saved and loaded, against PyTorch DCP (torch.distributed.checkpoint, 2 ranks, gloo) and the
// disk's own sequential write bandwidth, all in one invocation.
//
//   checkpoint_bench [--ranks 2] [--threads 1] [--steps 30] [--interval 10] [--warmup 2]
//                    [--repeat 3] [--dir DIR] [--drop-caches] [--skip-peers] [--tiny]
//                    [--throughput-only] [--json FILE]
//
// The model is ddp_bench's medium config (a GPT of 6 layers x 384, 6 heads, seq 256, vocab
// 4096: 12.3M parameters; micro-batch 4 per rank), AdamW; --tiny: CI's smoke size.
//
// 1. Overhead (DDP over --ranks ranks, --threads compute threads each): --warmup steps, then
//    --steps timed steps, once with no checkpoints and once with an asynchronous checkpoint
//    every --interval steps (checkpoint.async; DDP: each rank writes half of the state, 12
//    bytes a parameter in all), in alternating order, --repeat times, each run a fresh trainer on
//    one local cluster. Timed: the steps and the checkpoints' work between them (after_step:
//    starting a save, committing a finished one, waiting for one still in flight); the last
//    checkpoint's tail after the last step is not a step's and is reported apart. The overhead is
//    1 - the median over repeats of (steps/s with) / (steps/s without). Goal: at most 3%.
// 2. Throughput: the same model state (fp32 parameters and AdamW's two moments) over --ranks
//    ranks, each owning 1/ranks of it (ZeRO-1's partitions): troupe's save (Checkpointer::
//    save_now: the shards' staging copy, their writes with fsync, the manifest and latest) and
//    load (Checkpointer::load: find and check the checkpoint, every shard reads and verifies
//    its range, the loaders seek), against DCP saving and loading a state dict of the same
//    tensors per rank (bench/checkpoint_bench_dcp.py); and the disk's sequential write
//    bandwidth: the same bytes in one file, 4 MiB writes and an fdatasync. --repeat rounds, each
//    measuring troupe's save and load, the disk and DCP's save and load back to back (a shared
//    machine's disk speed changes from minute to minute); the figures are medians, the ratios
//    medians of each round's ratio. MB/s = 10^6 bytes per second. Goals: save at least 1.5x DCP's,
//    and at least 80% of the disk's. Loads read from the page cache unless --drop-caches (root)
//    empties it first, on both sides alike.
//
// DCP is skipped with a message when no python here imports torch (bench/setup_torch_peers.sh).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/bench_fail.h"
#include "bench/bench_shapes.h"
#include "bench/bench_util.h"
#include "core/cluster/cluster.h"
#include "core/cluster/local_cluster.h"
#include "core/io/env.h"
#include "nn/model/model.h"
#include "trainers/checkpointer.h"
#include "trainers/config.h"
#include "trainers/data_parallel_trainer.h"

#ifndef TROUPE_BINARY
#define TROUPE_BINARY "troupe"
#endif
#ifndef TROUPE_CHECKPOINT_BENCH_PEER_SCRIPT
#define TROUPE_CHECKPOINT_BENCH_PEER_SCRIPT "bench/checkpoint_bench_dcp.py"
#endif

namespace troupe::bench {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

trainers::TrainConfig train_config(const Shape& s, int ranks, int stage, const std::string& dir) {
  trainers::TrainConfig c;
  c.parallel.dp = ranks;
  c.zero.stage = stage;
  c.gradient_accumulation_steps = 1;
  c.micro_batch_size = s.B;
  c.train_batch_size = static_cast<int64_t>(s.B) * ranks;
  c.model = gpt_config(s);
  c.data.synthetic = trainers::SyntheticTaskConfig{
      .task = "addition", .digits = 3, .num_samples = 4096, .seed = 7};
  c.optimizer.type = trainers::OptimizerType::kAdamW;
  c.optimizer.adamw = {
      .lr = 1e-4f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
  c.lr_schedule = nn::LrSchedule::constant(1e-4f);
  c.zero.reduce_bucket_size = 1572864;
  c.training.seed = 1337;
  c.checkpoint = {.dir = dir, .interval_steps = 0, .keep = 2, .async = true};
  return c;
}

class Bench {
 public:
  Bench(int ranks, int threads) : threads_(threads) {
    cluster::LocalClusterOptions o;
    o.workers = ranks;
    o.default_resources = "CPU=2";
    o.troupe_binary = TROUPE_BINARY;
    o.echo_output = false;
    // The workers' OpenMP (and so OpenBLAS) threads, as ddp_bench sets them.
    ::setenv("OMP_NUM_THREADS", std::to_string(threads).c_str(), 1);
    local_ = value_or_die(cluster::LocalCluster::start(o), "starting the local cluster");
    ::unsetenv("OMP_NUM_THREADS");
    driver_ = value_or_die(Cluster::connect(local_->client_options()), "connecting the driver");
  }
  ~Bench() {
    driver_.reset();
    local_.reset();
  }

  std::unique_ptr<trainers::DataParallelTrainer> start(const trainers::TrainConfig& c) {
    return value_or_die(trainers::DataParallelTrainer::start(
                            *driver_, c, "checkpoint-bench-" + std::to_string(++jobs_), threads_),
                        "starting the trainer");
  }

 private:
  int threads_;
  int jobs_ = 0;
  std::unique_ptr<cluster::LocalCluster> local_;
  std::unique_ptr<Cluster> driver_;
};

struct OverheadRun {
  double steps_per_s = 0;
  int checkpoints = 0;
  double tail_ms = 0;     // the last checkpoint's finish after the last step
  double staging_ms = 0;  // the median of the run's checkpoints' (the first allocates its buffer)
  double waited_ms = 0;   // summed
};

OverheadRun run_training(Bench& bench, trainers::TrainConfig c, int warmup, int steps) {
  auto trainer = bench.start(c);
  trainers::Checkpointer checkpoints(
      trainer->controller(), trainers::job_record(c, trainer->data_info().samples_per_epoch),
      c.checkpoint);
  OverheadRun r;
  std::vector<double> staging;
  auto note = [&](const std::vector<trainers::CheckpointEvent>& events) {
    for (const trainers::CheckpointEvent& e : events) {
      if (!e.status.ok()) die("a checkpoint failed: " + e.status.ToString());
      ++r.checkpoints;
      staging.push_back(e.staging_ms);
      r.waited_ms += e.waited_ms;
    }
  };
  Clock::time_point start;
  for (int k = 1; k <= warmup + steps; ++k) {
    if (k == warmup + 1) start = Clock::now();
    value_or_die(trainer->step(k), "step " + std::to_string(k));
    note(checkpoints.after_step(k));
  }
  r.steps_per_s = steps / seconds_since(start);
  const Clock::time_point tail = Clock::now();
  note(checkpoints.finish());
  r.tail_ms = seconds_since(tail) * 1e3;
  r.staging_ms = median(staging);
  if (absl::Status s = trainer->stop(); !s.ok()) die("stopping: " + s.ToString());
  return r;
}

// The disk's sequential write bandwidth for `bytes`: 4 MiB writes, then fdatasync. MB/s.
double disk_write_mbps(const std::string& dir, size_t bytes) {
  io::Env* env = io::Env::posix();
  const std::vector<char> chunk(size_t{4} << 20, 'x');
  const std::string path = dir + "/disk-bandwidth.bin";
  const Clock::time_point start = Clock::now();
  auto f = value_or_die(env->new_writable_file(path, {}), "the bandwidth file");
  for (size_t at = 0; at < bytes; at += chunk.size()) {
    if (absl::Status s = f->append(chunk.data(), std::min(chunk.size(), bytes - at)); !s.ok()) {
      die(s.ToString());
    }
  }
  if (absl::Status s = f->sync(); !s.ok()) die(s.ToString());
  if (absl::Status s = f->close(); !s.ok()) die(s.ToString());
  const double seconds = seconds_since(start);
  fs::remove(path);
  return static_cast<double>(bytes) / seconds / 1e6;
}

bool drop_caches() {
  ::sync();
  FILE* f = std::fopen("/proc/sys/vm/drop_caches", "w");
  if (f == nullptr) return false;
  const bool ok = std::fputs("3\n", f) >= 0;
  return std::fclose(f) == 0 && ok;
}

struct DcpResult {
  double save_mbps = 0;
  double load_mbps = 0;
  std::string note;
};

DcpResult run_dcp(const std::string& python, int64_t elements, int ranks, const std::string& dir,
                  int repeat, bool drop) {
  const std::string cmd =
      shell_quote(python) + " " + shell_quote(TROUPE_CHECKPOINT_BENCH_PEER_SCRIPT) +
      " --elements " + std::to_string(elements) + " --ranks " + std::to_string(ranks) + " --dir " +
      shell_quote(dir) + " --repeat " + std::to_string(repeat) + " --parent-pid " +
      std::to_string(::getpid()) + (drop ? " --drop-caches" : "") + " 2>&1";
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) return {.note = "cannot start the DCP peer"};
  const std::string out = read_all(pipe);
  const int status = ::pclose(pipe);
  const size_t line = out.rfind("{\"save_ms\"");
  if (status != 0 || line == std::string::npos) {
    return {.note = "the DCP peer failed: " + out.substr(out.size() > 600 ? out.size() - 600 : 0)};
  }
  const std::string json = out.substr(line);
  auto list = [&](const std::string& key) {
    std::vector<double> v;
    size_t at = json.find("\"" + key + "\": [");
    if (at == std::string::npos) return v;
    at = json.find('[', at) + 1;
    const size_t end = json.find(']', at);
    while (at < end) {
      char* next = nullptr;
      v.push_back(std::strtod(json.c_str() + at, &next));
      at = static_cast<size_t>(next - json.c_str());
      while (at < end && (json[at] == ',' || json[at] == ' '))
        ++at;
    }
    return v;
  };
  const double bytes = json_number(json, "bytes").value_or(0);
  DcpResult r;
  r.save_mbps = bytes / (median(list("save_ms")) / 1e3) / 1e6;
  r.load_mbps = bytes / (median(list("load_ms")) / 1e3) / 1e6;
  r.note = "torch " + json_string(json, "torch");
  return r;
}

}  // namespace
}  // namespace troupe::bench

int main(int argc, char** argv) {
  using namespace troupe;
  using namespace troupe::bench;
  Flags flags(argc, argv);
  if (flags.has("--help")) {
    std::printf(
        "usage: checkpoint_bench [--ranks 2] [--threads 1] [--steps 30] [--interval 10]\n"
        "                        [--warmup 2] [--repeat 3] [--dir DIR] [--drop-caches]\n"
        "                        [--skip-peers] [--tiny] [--throughput-only] [--json FILE]\n");
    return 0;
  }
  const bool tiny = flags.has("--tiny");
  const Shape shape = tiny ? kTiny : kMedium;
  const int ranks = static_cast<int>(flags.get_long("--ranks", 2));
  const int threads = static_cast<int>(flags.get_long("--threads", 1));
  const int steps = static_cast<int>(flags.get_long("--steps", tiny ? 4 : 30));
  const int interval = static_cast<int>(flags.get_long("--interval", tiny ? 2 : 10));
  const int warmup = static_cast<int>(flags.get_long("--warmup", tiny ? 1 : 2));
  const int repeat = static_cast<int>(flags.get_long("--repeat", tiny ? 1 : 3));
  const bool drop = flags.has("--drop-caches");
  const std::string dir = flags.get(
      "--dir",
      (fs::temp_directory_path() / ("checkpoint-bench-" + std::to_string(::getpid()))).string());
  fs::remove_all(dir);
  fs::create_directories(dir);
  const trainers::TrainConfig base = train_config(shape, ranks, 0, dir + "/overhead");
  const int64_t params = static_cast<int64_t>(nn::model_layout(base.model).num_params());
  const size_t state_bytes = static_cast<size_t>(params) * 3 * sizeof(float);
  std::printf(
      "checkpoint_bench: GPT %d layers x %d, seq %d, vocab %d: %lld parameters, %.1f MB of "
      "state (fp32 + AdamW); %d ranks x %d threads; in %s\n",
      shape.L, shape.C, shape.T, shape.V, static_cast<long long>(params), state_bytes / 1e6, ranks,
      threads, dir.c_str());
  std::fflush(stdout);
  Bench bench(ranks, threads);

  // 1. What checkpointing costs the training.
  std::vector<double> ratios, with_sps, without_sps, staging, tails;
  const int rounds = flags.has("--throughput-only") ? 0 : repeat;
  for (int r = 0; r < rounds; ++r) {
    OverheadRun with, without;
    for (int order = 0; order < 2; ++order) {
      const bool checkpointing = (order + r) % 2 == 0;
      trainers::TrainConfig c = base;
      c.checkpoint.interval_steps = checkpointing ? interval : 0;
      OverheadRun run = run_training(bench, c, warmup, steps);
      (checkpointing ? with : without) = run;
      fs::remove_all(dir + "/overhead");
    }
    ratios.push_back(with.steps_per_s / without.steps_per_s);
    with_sps.push_back(with.steps_per_s);
    without_sps.push_back(without.steps_per_s);
    staging.push_back(with.staging_ms);
    tails.push_back(with.tail_ms);
    std::printf(
        "  round %d: %.3f steps/s with a checkpoint every %d steps (%d saved, training waited "
        "%.0f ms), %.3f without: %.2f%% overhead\n",
        r + 1, with.steps_per_s, interval, with.checkpoints, with.waited_ms, without.steps_per_s,
        100 * (1 - ratios.back()));
    std::fflush(stdout);
  }
  const double overhead = 1 - median(ratios);

  // 2. Save and load throughput of the same state over the ranks, each its partition.
  trainers::TrainConfig zc = train_config(shape, ranks, 1, dir + "/throughput");
  auto trainer = bench.start(zc);
  trainers::Checkpointer checkpoints(
      trainer->controller(), trainers::job_record(zc, trainer->data_info().samples_per_epoch),
      zc.checkpoint);
  std::optional<std::string> python;
  std::string dcp_note;
  if (flags.has("--skip-peers")) {
    dcp_note = "skipped (--skip-peers)";
  } else if ((python = find_torch_python())) {
    dcp_note = "torch";
  } else {
    dcp_note = "skipped: no python here imports torch (bench/setup_torch_peers.sh installs it)";
  }
  // The disk's speed varies from minute to minute on a shared machine: each round measures
  // troupe's save, the disk and DCP back to back, and the ratios are each round's.
  std::vector<double> save_mbps, load_mbps, write_ms, disk_mbps, dcp_save, dcp_load;
  std::vector<double> vs_disk, vs_dcp_save, vs_dcp_load;
  bool dropped = drop;
  // A step before each save, as in training; the first save allocates the staging buffers
  // (a warm-up, not counted).
  int64_t step = 0;
  for (int r = 0; r < repeat + 1; ++r) {
    ++step;
    value_or_die(trainer->step(step), "step " + std::to_string(step));
    const trainers::CheckpointEvent e = checkpoints.save_now().back();
    if (!e.status.ok()) die("save: " + e.status.ToString());
    if (r == 0) continue;
    save_mbps.push_back(static_cast<double>(e.bytes) / (e.total_ms / 1e3) / 1e6);
    write_ms.push_back(e.write_ms);
    if (drop) dropped = drop_caches() && dropped;
    const Clock::time_point t0 = Clock::now();
    trainers::LoadedCheckpoint loaded = value_or_die(checkpoints.load(step), "load");
    load_mbps.push_back(static_cast<double>(loaded.bytes) / seconds_since(t0) / 1e6);
    disk_mbps.push_back(disk_write_mbps(dir, state_bytes));
    vs_disk.push_back(save_mbps.back() / disk_mbps.back());
    if (python) {
      DcpResult d = run_dcp(*python, params, ranks, dir + "/dcp", 1, drop);
      if (d.save_mbps <= 0) {
        dcp_note = d.note;
        python.reset();
      } else {
        dcp_note = d.note;
        dcp_save.push_back(d.save_mbps);
        dcp_load.push_back(d.load_mbps);
        vs_dcp_save.push_back(save_mbps.back() / d.save_mbps);
        vs_dcp_load.push_back(load_mbps.back() / d.load_mbps);
      }
    }
    std::printf("  round %d: save %.0f MB/s, load %.0f MB/s, disk %.0f MB/s%s\n", r,
                save_mbps.back(), load_mbps.back(), disk_mbps.back(),
                dcp_save.size() == static_cast<size_t>(r)
                    ? (", DCP save " + std::to_string(static_cast<int>(dcp_save.back())) +
                       " MB/s, load " + std::to_string(static_cast<int>(dcp_load.back())) + " MB/s")
                          .c_str()
                    : "");
    std::fflush(stdout);
  }
  if (absl::Status s = trainer->stop(); !s.ok()) die("stopping: " + s.ToString());
  fs::remove_all(dir);

  std::printf("\n");
  std::vector<Row> rows = {
      {"save (MB/s)", "MB/s", median(save_mbps), median(dcp_save)},
      {"load (MB/s)", "MB/s", median(load_mbps), median(dcp_load)},
  };
  print_table("DCP", rows);
  std::printf("  DCP: %s\n", dcp_note.c_str());
  const double disk = median(disk_mbps);
  std::printf(
      "  disk sequential write (same bytes, fdatasync): %.0f MB/s; troupe's save is %.0f%% of it "
      "(median of the rounds' ratios; goal >= 80%%); the slowest shard's write %.0f ms\n",
      disk, 100 * median(vs_disk), median(write_ms));
  if (!vs_dcp_save.empty()) {
    std::printf("  save vs DCP: %.2fx (goal >= 1.5x); load vs DCP: %.2fx%s\n", median(vs_dcp_save),
                median(vs_dcp_load),
                drop ? (dropped ? " (page cache dropped before each load)"
                                : " (the page cache could not be dropped)")
                     : " (loads from the page cache)");
  }
  if (rounds > 0) {
    std::printf(
        "  training with a checkpoint every %d steps: %.3f steps/s against %.3f without: %.2f%% "
        "overhead (median of %d rounds; goal <= 3%%); step boundary's copy %.1f ms (median), the "
        "last checkpoint's tail after the last step %.0f ms\n",
        interval, median(with_sps), median(without_sps), 100 * overhead, rounds, median(staging),
        median(tails));
  }
  rows.push_back(
      {"training steps/s with checkpoints", "steps/s", median(with_sps), median(without_sps)});
  rows.push_back({"troupe save vs disk write", "MB/s", median(save_mbps), disk});
  if (flags.has("--json")) {
    if (!write_json(flags.get("--json", ""), "checkpoint_bench", "DCP", rows)) {
      die("cannot write " + flags.get("--json", ""));
    }
  }
  return 0;
}
