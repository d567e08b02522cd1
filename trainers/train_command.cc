#include "trainers/train_command.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "actors/pipeline/schedule.h"
#include "actors/zero_partition.h"
#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/pretrained.h"
#include "core/cluster/cluster.h"
#include "core/cluster/flags.h"
#include "core/cluster/launch_env.h"
#include "core/cluster/local_cluster.h"
#include "nn/cpu_peak.h"
#include "nn/memory.h"
#include "nn/model/flops.h"
#include "nn/model/layout.h"
#include "trainers/checkpointer.h"
#include "trainers/config.h"
#include "trainers/elastic_scaler.h"
#include "trainers/interrupt.h"
#include "trainers/job_device.h"
#include "trainers/model_file.h"
#include "trainers/progress.h"
#include "trainers/run_metrics.h"
#include "trainers/run_tokenizer.h"
#include "trainers/run_watchers.h"
#include "trainers/trainer.h"

namespace troupe::trainers {
namespace {

using cluster::Flags;

int fail(const std::string& what, const absl::Status& s) {
  std::fprintf(stderr, "troupe train: %s: %s\n", what.c_str(),
               cluster::printable(s.message()).c_str());
  return 1;
}

int usage_error(const std::string& text) {
  std::fprintf(stderr, "troupe train: %s (see troupe train --help)\n",
               cluster::printable(text).c_str());
  return 2;
}

void print_train_help() {
  std::printf(
      "usage: troupe train (CONFIG.json | --config FILE) [--local N | --head HOST:PORT]\n"
      "                    [--steps N] [--output DIR] [--metrics FILE] [--threads N]\n"
      "                    [--device auto|cpu|cuda] [--resume]\n"
      "                    [--trace FILE [--trace-steps A:B]]\n\n"
      "Trains the model the config describes over a mesh of dp x pp stages: dp replicas\n"
      "(DDP or ZeRO-1/2/3), each a pipeline of pp stages running the config's schedule;\n"
      "each stage with a parameter shard and a data loader on one node.\n\n"
      "  --config FILE     DeepSpeed-style JSON plus troupe's model, data, parallel and\n"
      "                    training sections (docs/config.md; examples/configs/); or\n"
      "                    the file as the first argument\n"
      "  --local N         start a local cluster (a head and N workers, and\n"
      "                    fault_tolerance.spare_nodes more) for this run and stop it at\n"
      "                    the end (as ray.init() with no address)\n"
      "  --head HOST:PORT  use a running cluster (`troupe head`, `troupe worker`); also\n"
      "                    $TROUPE_HEAD, or the Slurm, torchrun or JobSet launch this\n"
      "                    runs in. Its token: --token-file or $TROUPE_TOKEN\n"
      "  --steps N         override training.steps (a scheduler decaying over another\n"
      "                    total_num_steps is warned about)\n"
      "  --output DIR      override training.output_dir (default runs/<job>)\n"
      "  --metrics FILE    override training.metrics_file (default DIR/metrics.jsonl)\n"
      "  --threads N       compute threads per stage (default: cores / stages with\n"
      "                    --local, else each worker's default)\n"
      "  --device D        override the config's device: cuda (a GPU for each stage),\n"
      "                    cpu, or auto (cuda when every worker offers a GPU)\n"
      "  --resume          continue from the newest checkpoint in checkpoint.dir (its\n"
      "                    `latest`), in this run's layout: dp and ZeRO stage may differ\n"
      "                    from the saved run's (docs/checkpoint.md)\n"
      "  --trace FILE      write the run as a Chrome/Perfetto trace (ui.perfetto.dev):\n"
      "                    each step, each rank's forward, backward and collectives,\n"
      "                    checkpoints, recoveries (docs/observability.md)\n"
      "  --trace-steps A:B only steps A to B in the trace (A: or :B for open ends)\n\n"
      "Shows a progress line per training.log_interval steps, evaluates the task accuracy\n"
      "of a synthetic task, writes DIR/model.json + model.bin (for troupe generate) and a\n"
      "metrics line per step. With checkpoint.interval_steps, saves a checkpoint into\n"
      "checkpoint.dir every that many steps, in the background. With fault_tolerance\n"
      "enabled, a lost worker costs the step in flight: its ranks are replaced and\n"
      "restored, and the step runs again (docs/fault_tolerance.md).\n");
}

std::string job_name() {
  auto now = std::chrono::system_clock::now().time_since_epoch();
  return absl::StrFormat("train-%d-%d", static_cast<int>(getpid()),
                         std::chrono::duration_cast<std::chrono::seconds>(now).count() % 100000);
}

std::string self_executable() {
  char path[4096];
  ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (n <= 0) return "troupe";
  path[n] = '\0';
  return path;
}

// Evaluates the synthetic task on replica 0 and reports it. Errors: those of
// writing the metrics (a failed evaluation is reported and training goes on).
absl::Status evaluate(Trainer& trainer, const TrainConfig& config, int64_t step,
                      ProgressReporter& progress, std::optional<MetricsWriter>& metrics,
                      std::optional<double>* accuracy) {
  absl::StatusOr<actors::EvalReport> report = trainer.evaluate(config.training.eval_samples);
  if (!report.ok()) {
    progress.message(absl::StrCat("evaluation failed: ", report.status().message()));
    return absl::OkStatus();
  }
  double acc = report->total > 0 ? static_cast<double>(report->correct) / report->total : 0;
  progress.message(
      absl::StrFormat("eval at step %d: addition accuracy %.1f%% (%d/%d held-out problems)", step,
                      100 * acc, report->correct, report->total));
  if (metrics) {
    if (absl::Status s = metrics->write_eval(step, *report); !s.ok()) return s;
  }
  if (accuracy != nullptr) {
    *accuracy = acc;
    for (const std::string& e : report->examples)
      progress.message("  " + e);
  }
  return absl::OkStatus();
}

// The job cannot go on: a checkpoint of where it stands, if it has a
// checkpoint directory and its shards can still write one; otherwise which
// checkpoint a --resume would continue from.
// Members lost without a replacement are left out: the survivors save their
// state from a replica (Checkpointer::save_now).
void save_after_failure(Checkpointer& checkpoints, const TrainConfig& config,
                        const std::vector<actors::Coordinate>& lost, ProgressReporter& progress) {
  if (config.checkpoint.dir.empty()) {
    progress.message("no checkpoint.dir in the config: nothing was saved of this run");
    return;
  }
  std::vector<CheckpointEvent> events = checkpoints.save_now(lost);
  if (!events.empty() && events.back().status.ok()) {
    progress.message(absl::StrCat("saved a last checkpoint, ", events.back().step_dir,
                                  lost.empty() ? "" : " (by the surviving ranks)",
                                  "; continue with --resume"));
    return;
  }
  absl::StatusOr<std::vector<int64_t>> saved =
      checkpoint::list_checkpoints(io::Env::posix(), config.checkpoint.dir);
  const std::string why =
      events.empty() ? std::string("nothing to save") : std::string(events.back().status.message());
  if (saved.ok() && !saved->empty()) {
    progress.message(cluster::printable(absl::StrCat(
        "no last checkpoint (", why, "); --resume continues from step ", saved->back())));
  } else {
    progress.message(cluster::printable(absl::StrCat("no checkpoint could be saved (", why, ")")));
  }
}

}  // namespace

int train_command(const std::vector<std::string>& all_args) {
  // `troupe train CONFIG.json [flags]`: the config as the first argument.
  std::vector<std::string> args = all_args;
  std::string config_path;
  if (!args.empty() && !args.front().starts_with("-")) {
    config_path = args.front();
    args.erase(args.begin());
  }
  auto flags = Flags::parse("train", args,
                            {"config", "local", "head", "token-file", "steps", "output", "metrics",
                             "threads", "device", "resume", "trace", "trace-steps"},
                            {"resume"});
  if (!flags.ok()) {
    std::fprintf(stderr, "%s\n", cluster::printable(flags.status().message()).c_str());
    return 2;
  }
  if (flags->help()) {
    print_train_help();
    return 0;
  }
  if (flags->has("config") && !config_path.empty()) {
    return usage_error(absl::StrCat("the config is given twice ('", config_path, "' and --config ",
                                    flags->get("config"),
                                    "): give one, as CONFIG.json or --config FILE"));
  }
  if (config_path.empty()) config_path = flags->get("config");
  if (config_path.empty()) return usage_error("a config is required: troupe train CONFIG.json");
  absl::StatusOr<TrainConfig> loaded = load_train_config(config_path);
  if (!loaded.ok()) {
    std::fprintf(stderr, "troupe train: %s\n",
                 cluster::printable(loaded.status().message()).c_str());
    return 2;
  }
  TrainConfig config = *std::move(loaded);
  for (const std::string& w : config.warnings)
    std::fprintf(stderr, "troupe train: warning: %s\n", cluster::printable(w).c_str());
  if (absl::Status s = check_data_exists(config); !s.ok()) {
    std::fprintf(stderr, "troupe train: %s\n", cluster::printable(s.message()).c_str());
    return 2;
  }
  // Pretrained weights: there, and of the config's model, before any actor is spawned.
  if (!config.training.init_from.empty()) {
    absl::StatusOr<std::optional<nn::ModelConfig>> pretrained =
        checkpoint::pretrained_config(io::Env::posix(), config.training.init_from);
    absl::Status s = pretrained.status();
    if (s.ok() && *pretrained) s = checkpoint::check_pretrained_config(config.model, **pretrained);
    if (!s.ok()) {
      std::fprintf(stderr, "troupe train: training.init_from %s\n",
                   cluster::printable(s.message()).c_str());
      return 2;
    }
  }
  int local_workers = 0;
  if (flags->has("local") && (!absl::SimpleAtoi(flags->get("local"), &local_workers) ||
                              local_workers < 1 || local_workers > kMaxLocalWorkers)) {
    return usage_error(
        absl::StrCat("--local takes a number of workers from 1 to ", kMaxLocalWorkers));
  }
  if (flags->has("local") && flags->has("head"))
    return usage_error("give --local or --head, not both");
  if (flags->has("steps") && (!absl::SimpleAtoi(flags->get("steps"), &config.training.steps) ||
                              config.training.steps < 1)) {
    return usage_error("--steps takes a number >= 1");
  }
  if (flags->has("device")) {
    std::optional<DeviceChoice> device = parse_device_choice(flags->get("device"));
    if (!device) return usage_error("--device takes auto, cpu or cuda");
    config.device = *device;
  }
  if (std::optional<std::string> w = steps_schedule_mismatch(config); w.has_value())
    std::fprintf(stderr, "troupe train: warning: %s\n", w->c_str());
  int threads = config.training.threads;
  if (flags->has("threads") && (!absl::SimpleAtoi(flags->get("threads"), &threads) || threads < 1 ||
                                threads > kMaxThreads)) {
    return usage_error(absl::StrCat("--threads takes a number from 1 to ", kMaxThreads));
  }
  const bool resume = flags->has("resume");
  if (resume && config.checkpoint.dir.empty()) {
    return usage_error("--resume needs checkpoint.dir in the config");
  }
  const std::string job = job_name();
  std::string output_dir = flags->get("output", config.training.output_dir);
  if (output_dir.empty()) output_dir = "runs/" + job;
  std::string metrics_path = flags->get("metrics", config.training.metrics_file);
  if (metrics_path.empty()) metrics_path = output_dir + "/metrics.jsonl";

  // From here a Ctrl-C stops the run in order (trainers/interrupt.h); the
  // guard outlives the local cluster, whose destructor cleans it up.
  InterruptGuard interrupt;
  // The cluster: our own local one, or a running one.
  std::unique_ptr<cluster::LocalCluster> local;
  ClusterOptions options{.head = flags->get("head"),
                         .token_file = flags->get("token-file"),
                         .name = "troupe train " + job};
  if (local_workers > 0) {
    unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    // A stage's tp slices share a bundle of tp CPUs on one node: each worker
    // offers at least that many.
    const unsigned worker_cpus = std::max(cores, static_cast<unsigned>(config.parallel.tp));
    const int spares = config.fault_tolerance.enabled ? config.fault_tolerance.spare_nodes : 0;
    // This machine's GPUs, each rank its own where there are enough (NVML: no CUDA runtime).
    const LocalGpuPlan gpus =
        plan_local_gpus(cluster::gpu_inventory().devices, local_workers + spares,
                        static_cast<int>(worker_cpus), config.device);
    std::printf(
        "starting a local cluster: a head and %d workers%s%s\n", local_workers,
        spares > 0 ? absl::StrCat(" and ", spares, spares == 1 ? " spare" : " spares").c_str() : "",
        gpus.summary.empty() ? "" : (", " + gpus.summary).c_str());
    auto started =
        cluster::LocalCluster::start({.workers = local_workers + spares,
                                      .worker_resources = gpus.resources,
                                      .default_resources = absl::StrCat("CPU=", worker_cpus),
                                      .worker_visible_devices = gpus.visible_devices,
                                      .troupe_binary = self_executable(),
                                      .echo_output = false});
    if (!started.ok()) return fail("starting a local cluster", started.status());
    local = *std::move(started);
    options = local->client_options();
    options.name = "troupe train " + job;
    if (threads == 0) {
      threads = std::max(1, static_cast<int>(cores) /
                                (config.parallel.dp * config.parallel.pp * config.parallel.tp));
    }
  } else if (const char* env = std::getenv("TROUPE_HEAD");
             options.head.empty() && (env == nullptr || *env == '\0')) {
    // Inside a Slurm, torchrun or JobSet launch the head is where it says.
    absl::StatusOr<std::optional<cluster::LaunchEnv>> launched = cluster::detect_launch_env();
    if (!launched.ok()) return usage_error(std::string(launched.status().message()));
    if (!launched->has_value()) {
      return usage_error("give --local N to start a local cluster, or --head HOST:PORT");
    }
  }
  auto cluster = Cluster::connect(options);
  if (!cluster.ok()) return fail("connecting to the cluster", cluster.status());
  // "auto" becomes what the workers offer; what the run records is what it ran on.
  const DeviceChoice asked_device = config.device;
  absl::StatusOr<TrainConfig> resolved = with_device_resolved(**cluster, config);
  if (!resolved.ok()) return fail("choosing the device", resolved.status());
  config = *std::move(resolved);

  std::printf(
      "job %s: %s: %zu parameters, on %s%s\n"
      "  dp %d%s, global batch %lld = micro %lld x accumulation %lld x dp %d%s\n",
      job.c_str(), config.model.describe().c_str(), nn::model_layout(config.model).num_params(),
      device_choice_name(config.device),
      asked_device == DeviceChoice::kAuto && config.device == DeviceChoice::kCuda
          ? " (every worker offers a GPU)"
          : "",
      config.parallel.dp,
      config.parallel.pp > 1 || config.parallel.tp > 1
          ? absl::StrCat(" x pp ", config.parallel.pp, " x tp ", config.parallel.tp).c_str()
          : "",
      static_cast<long long>(config.train_batch_size),
      static_cast<long long>(config.micro_batch_size),
      static_cast<long long>(config.gradient_accumulation_steps), config.parallel.dp,
      config.fp16.enabled ? ", fp16 (loss scaling)" : (config.bf16 ? ", bf16" : ""));
  std::fflush(stdout);
  auto started = start_trainer(**cluster, config, job, threads);
  if (!started.ok()) return fail("starting the replicas", started.status());
  Trainer& trainer = **started;
  std::printf("  %s\n", trainer.describe().c_str());
  if (trainer.elastic() != nullptr) {
    std::printf(
        "  elastic: dp %d to %d; grows onto workers that join, leaves drained and lost ones, "
        "keeping the global batch\n",
        smallest_dp(config), config.elasticity.max_dp);
  }
  const int64_t steps =
      config.training.steps > 0 ? config.training.steps : trainer.data_info().steps_per_epoch;
  std::printf("  data: %lld samples, %lld steps an epoch; training %lld steps\n",
              static_cast<long long>(trainer.data_info().num_samples),
              static_cast<long long>(trainer.data_info().steps_per_epoch),
              static_cast<long long>(steps));
  std::fflush(stdout);
  // Model FLOP/s and MFU: training FLOPs per token against the ranks' peak.
  std::string peak_note;
  const FlopsModel flops = flops_model(config, local_workers > 0 ? threads : 0, &peak_note);
  std::printf("  model FLOPs: %s a token (6N + 12 L H Q T); peak %s\n",
              absl::StrReplaceAll(format_flops(flops.flops_per_token), {{"/s", ""}}).c_str(),
              peak_note.c_str());
  std::fflush(stdout);
  // Where to watch it: the head's HTTP status, which it publishes when it serves one.
  if (absl::StatusOr<std::optional<std::string>> url = (*cluster)->kv_get(cluster::kHttpUrlKey);
      url.ok() && url->has_value()) {
    std::printf("  watch it: %s (Prometheus: %smetrics; job %u)\n",
                cluster::printable(**url).c_str(), cluster::printable(**url).c_str(),
                (*cluster)->node_index());
    std::fflush(stdout);
  }

  // The data's tokenizer goes with the checkpoints and the weights (trainers/run_tokenizer.h).
  absl::StatusOr<RunTokenizer> tokenizer = run_tokenizer(config);
  if (!tokenizer.ok()) return fail("reading the data's tokenizer", tokenizer.status());
  if (!config.checkpoint.dir.empty()) {
    if (absl::Status s = save_run_tokenizer(*tokenizer, config.checkpoint.dir); !s.ok()) {
      return fail("saving the tokenizer with the checkpoints", s);
    }
  }
  JobRecord job_info = job_record(config, trainer.data_info().samples_per_epoch);
  job_info.tokenizer = tokenizer->id;
  Checkpointer checkpoints(trainer.controller(), std::move(job_info), config.checkpoint);
  std::optional<LoadedCheckpoint> resumed;
  if (resume) {
    absl::StatusOr<std::vector<int64_t>> saved =
        checkpoint::list_checkpoints(io::Env::posix(), config.checkpoint.dir);
    if (!saved.ok() && !absl::IsNotFound(saved.status())) {
      return fail("resuming: reading " + config.checkpoint.dir, saved.status());
    }
    if (!saved.ok() || saved->empty()) {
      std::printf("  resume: no checkpoint in %s yet; starting at step 1\n",
                  config.checkpoint.dir.c_str());
    } else {
      absl::StatusOr<LoadedCheckpoint> restored = checkpoints.load();
      if (!restored.ok()) return fail("resuming", restored.status());
      for (const std::string& line : restored->skipped)
        std::printf("  checkpoint: %s\n", cluster::printable(line).c_str());
      const checkpoint::MeshLayout& l = restored->saved_layout;
      const std::string chunks =
          l.virtual_stages > 1 ? absl::StrCat(" (", l.virtual_stages, " chunks a stage)") : "";
      std::printf(
          "  resumed from %s (saved over dp %d x pp %d%s x tp %d, ZeRO stage %d): %s read in "
          "%.0f ms; data at sample %lld%s\n",
          restored->step_dir.c_str(), l.dp, l.pp / l.virtual_stages, chunks.c_str(), l.tp,
          l.zero_stage, nn::format_bytes(restored->bytes).c_str(), restored->load_ms,
          static_cast<long long>(restored->data_position),
          restored->config_changed ? "; the config differs from the saved run's" : "");
      resumed = *std::move(restored);
    }
  }
  const int64_t first_step = trainer.controller().next_step();
  if (first_step > steps) {
    std::printf("  nothing to do: the checkpoint is at step %lld of %lld\n",
                static_cast<long long>(first_step - 1), static_cast<long long>(steps));
  }
  std::fflush(stdout);
  auto metrics_file = MetricsWriter::open(metrics_path, /*append=*/resumed.has_value());
  if (!metrics_file.ok()) return fail("opening the metrics file", metrics_file.status());
  std::optional<MetricsWriter> metrics(std::move(*metrics_file));
  metrics->set_flops(flops);

  ProgressReporter progress(stdout, steps, config.training.log_interval);
  progress.set_flops(flops);
  // What watches the run besides the lines above: the head's metrics, --trace, TensorBoard.
  RunWatchersOptions watching{.cluster = cluster->get(),
                              .report_metrics = config.training.report_metrics,
                              .flops = flops,
                              .rank_every = config.training.log_interval,
                              .tensorboard_dir = config.training.tensorboard_dir,
                              .trace_path = flags->get("trace", "")};
  if (flags->has("trace-steps")) {
    absl::StatusOr<TraceWindow> w = parse_trace_window(flags->get("trace-steps"));
    if (!w.ok()) return usage_error(std::string(w.status().message()));
    watching.trace_window = *w;
  }
  absl::StatusOr<std::unique_ptr<RunWatchers>> watchers = RunWatchers::open(
      watching, [&](const std::string& line) { progress.message(cluster::printable(line)); });
  if (!watchers.ok()) return fail("opening the trace or TensorBoard file", watchers.status());
  for (const std::string& line : (*watchers)->describe())
    std::printf("  %s\n", cluster::printable(line).c_str());
  std::fflush(stdout);
  // A metrics file that cannot be written (a full disk) costs the metrics,
  // not the run, as a failed checkpoint save does: the first error is shown,
  // the lines after it are dropped, and the run ends non-zero once its
  // weights are saved.
  int64_t current_step = first_step - 1;
  absl::Status metrics_failure;
  int64_t metrics_failed_at = 0;
  auto record_metrics = [&](const absl::Status& s) {
    if (s.ok() || !metrics_failure.ok()) return;
    metrics_failure = s;
    metrics_failed_at = current_step;
    progress.message(
        cluster::printable(absl::StrCat("writing the metrics failed at step ", current_step, ": ",
                                        s.message(), "; training goes on without them")));
  };
  if (resumed) record_metrics(metrics->write_resume(*resumed));
  // A checkpoint saved, or failed (training goes on: the previous stays latest).
  auto report_checkpoints = [&](const std::vector<CheckpointEvent>& events) {
    for (const CheckpointEvent& e : events) {
      if (e.status.ok()) {
        progress.message(absl::StrFormat(
            "checkpoint %s: %s, step paused %.1f ms, written in %.0f ms%s", e.step_dir,
            nn::format_bytes(e.bytes), e.staging_ms, e.write_ms,
            e.waited_ms >= 1 ? absl::StrFormat(" (training waited %.0f ms)", e.waited_ms) : ""));
      } else {
        progress.message(absl::StrCat("checkpoint of step ", e.step,
                                      " failed: ", e.status.message(), "; training goes on"));
      }
      record_metrics(metrics->write_checkpoint(e));
      (*watchers)->on_checkpoint(e);
    }
  };
  RecoveringStepper stepper(trainer, config.checkpoint.dir.empty() ? nullptr : &checkpoints,
                            config.fault_tolerance);
  // What a recovery waits for, while it waits (the head, when it is away).
  stepper.set_on_note([&](const std::string& note) { progress.message(cluster::printable(note)); });
  auto on_recovery = [&](const RecoveryReport& r) {
    progress.message(cluster::printable(r.summary()));
    record_metrics(metrics->write_recovery(r));
    (*watchers)->on_recovery(r);
  };
  // Elasticity: the job grows onto workers that join and leaves drained or
  // lost ones, between steps (docs/elasticity.md).
  std::optional<ElasticScaler> scaler;
  if (ElasticMesh* mesh = trainer.elastic()) scaler.emplace(**cluster, *mesh, config);
  // What `troupe status` shows of the job: its size, step and dp history.
  auto publish = [&](int64_t step) {
    std::vector<std::string> history = {
        absl::StrCat(config.parallel.dp, " from step ", first_step)};
    for (const ResizeReport& r : scaler ? scaler->history() : std::vector<ResizeReport>{})
      history.push_back(absl::StrCat(r.to_dp, " from step ", r.step));
    (*cluster)
        ->kv_put(absl::StrCat("job/", (*cluster)->node_index(), "/training"),
                 absl::StrCat(trainer.describe(), ", step ", step, " of ", steps,
                              "; dp history: ", absl::StrJoin(history, ", ")))
        .IgnoreError();  // (shown for people; training goes on without it)
  };
  publish(first_step - 1);
  auto on_resize = [&](const ResizeReport& r) {
    progress.message(cluster::printable(r.summary()));
    publish(r.step - 1);
    record_metrics(metrics->write_resize(r));
    (*watchers)->on_resize(r);
  };
  double first_loss = 0, last_loss = 0;
  ValidationTrack validation;
  // checkpoint.keep_best: step k's checkpoint (saved now unless it is due anyway) becomes DIR/best.
  auto keep_best = [&](int64_t k) {
    const int64_t interval = config.checkpoint.interval_steps;
    if (interval == 0 || k % interval != 0) report_checkpoints(checkpoints.save_now());
    if (absl::Status s = checkpoints.mark_best(k); !s.ok()) {
      progress.message(absl::StrCat("marking the best checkpoint failed: ", s.message()));
    }
  };
  // Ctrl-C: the run stops after the step in flight, keeping what it has.
  int64_t last_step = steps;
  bool interrupted = false;
  for (int64_t k = first_step; k <= steps; ++k) {
    if (interrupt.requested()) {
      interrupted = true;
      last_step = k - 1;
      break;
    }
    current_step = k;
    if (scaler) {
      // A resize may take away ranks that write a checkpoint in flight.
      if (scaler->may_resize()) {
        report_checkpoints(checkpoints.finish());
      }
      absl::StatusOr<std::optional<ResizeReport>> resized = scaler->before_step(k);
      for (const std::string& n : scaler->take_notes())
        progress.message(cluster::printable(absl::StrCat("elasticity: ", n)));
      if (!resized.ok()) {
        progress.message("");
        return fail(absl::StrCat("resizing the job before step ", k), resized.status());
      }
      if (*resized) {
        on_resize(**resized);
      }
    }
    const double step_began_us = (*watchers)->now_us();
    absl::StatusOr<StepOutcome> outcome = stepper.step(k, on_recovery);
    if (!outcome.ok() && scaler) {
      // A lost rank without a replacement (no fault tolerance, or none came
      // in time): the job goes on without it.
      absl::StatusOr<ResizeReport> shrunk =
          scaler->shrink_after_loss(k, outcome.status(), trainer.controller());
      if (shrunk.ok()) {
        on_resize(*shrunk);
        if (trainer.controller().next_step() == k) {
          --k;  // the step runs again at the new size
          continue;
        }
        // (Its commit was applied by the survivors: it stands.)
        outcome = *trainer.controller().last_outcome();
      } else if (!absl::IsNotFound(shrunk.status())) {
        // (A last checkpoint below, as for any failure that ends the job.)
        outcome = absl::Status(
            outcome.status().code(),
            absl::StrCat(outcome.status().message(),
                         "; going on without the lost ranks failed: ", shrunk.status().message()));
      }
    }
    if (!outcome.ok()) {
      progress.message("");
      // A job that cannot go on keeps what it has: a last checkpoint.
      if (stepper.failures() > 0 || config.fault_tolerance.enabled || scaler) {
        save_after_failure(checkpoints, config, stepper.unrecovered(), progress);
      }
      return fail("training", outcome.status());  // the controller names the step
    }
    if (k == first_step) first_loss = outcome->loss;
    last_loss = outcome->loss;
    record_metrics(metrics->write_step(*outcome));
    progress.on_step(*outcome);
    (*watchers)->on_step(*outcome, step_began_us);
    if (k % config.training.log_interval == 0) publish(k);
    report_checkpoints(checkpoints.after_step(k));
    if (config.data.synthetic && config.training.eval_interval > 0 &&
        k % config.training.eval_interval == 0 && k < steps) {
      record_metrics(evaluate(trainer, config, k, progress, metrics, nullptr));
    }
    if (!config.data.val_path.empty() && config.training.eval_interval > 0 &&
        k % config.training.eval_interval == 0 && k < steps) {
      const double began_us = (*watchers)->now_us();
      absl::StatusOr<bool> best = validate_and_report(trainer, k, progress, metrics, &validation);
      record_metrics(best.status());
      if (best.ok() && validation.last) (*watchers)->on_validation(k, *validation.last, began_us);
      if (best.ok() && *best && config.checkpoint.keep_best) keep_best(k);
    }
  }
  // A run that ends between checkpoints saves its last step too, so that a
  // later --resume (with more steps) continues from where it ended; so does
  // an interrupted one with checkpoint.dir.
  // The last validation comes first, so that keep_best can mark the last checkpoint.
  bool last_is_best = false;
  if (!config.data.val_path.empty() && !interrupted && first_step <= last_step) {
    const double began_us = (*watchers)->now_us();
    absl::StatusOr<bool> best =
        validate_and_report(trainer, last_step, progress, metrics, &validation);
    record_metrics(best.status());
    if (best.ok() && validation.last) {
      (*watchers)->on_validation(last_step, *validation.last, began_us);
    }
    last_is_best = best.ok() && *best;
  }
  const int interval = config.checkpoint.interval_steps;
  if (first_step <= last_step && (interval > 0 || interrupted || last_is_best) &&
      !config.checkpoint.dir.empty() && (interval == 0 || last_step % interval != 0)) {
    report_checkpoints(checkpoints.save_now());
  }
  if (last_is_best && config.checkpoint.keep_best) {
    if (absl::Status s = checkpoints.mark_best(last_step); !s.ok()) {
      progress.message(absl::StrCat("marking the best checkpoint failed: ", s.message()));
    }
  }
  report_checkpoints(checkpoints.finish());
  (*watchers)->finish();
  std::optional<double> accuracy;
  if (config.data.synthetic && !interrupted) {
    record_metrics(evaluate(trainer, config, steps, progress, metrics, &accuracy));
  }
  record_metrics(metrics->close());

  auto params = trainer.master_params();
  if (!params.ok()) return fail("fetching the weights", params.status());
  SavedModel saved{.model = config.model,
                   .params = *std::move(params),
                   .step = last_step,
                   .tokenizer = tokenizer->id};
  // ZeRO-3 without consolidation on save (DeepSpeed's default): each rank's partition.
  const bool partitioned =
      config.zero.stage == 3 && !config.zero.stage3_gather_16bit_weights_on_model_save;
  if (partitioned) {
    const nn::ParamRange whole{0, saved.params.size()};
    for (int r = 0; r < config.parallel.dp; ++r)
      saved.partitions.push_back(actors::ZeroPartition(whole, config.parallel.dp, r).own().size());
  }
  if (absl::Status s = save_model(output_dir, saved); !s.ok()) {
    return fail("saving the weights", s);
  }
  if (absl::Status s = save_run_tokenizer(*tokenizer, output_dir); !s.ok()) {
    return fail("saving the tokenizer with the weights", s);
  }
  const RunTotals& t = progress.totals();
  const double tokens_per_s = t.seconds > 0 ? t.tokens / t.seconds : 0.0;
  // Per rank and MFU over the run: an elastic job's ranks change, so by replica-seconds.
  const double rank_seconds = t.dp_seconds * flops.ranks_per_replica;
  const double per_rank = rank_seconds > 0 ? t.tokens / rank_seconds : 0.0;
  std::string mfu;
  if (flops.peak_per_rank > 0 && rank_seconds > 0) {
    mfu = absl::StrFormat(", MFU %.1f%%", 100 * flops.flops_per_token * t.tokens /
                                              (flops.peak_per_rank * rank_seconds));
  }
  std::printf(
      "\ndone: %lld steps in %s (%lld skipped), loss %.4f -> %.4f\n"
      "  throughput %.0f tokens/s (%.0f a rank), %.1f samples/s; model %s%s; communication "
      "%.0f%% hidden behind compute; controller overhead %.2f ms/step\n",
      static_cast<long long>(t.steps), format_duration(t.seconds).c_str(),
      static_cast<long long>(t.skipped), first_loss, last_loss, tokens_per_s, per_rank,
      t.seconds > 0 ? t.samples / t.seconds : 0.0,
      format_flops(flops.flops_per_s(tokens_per_s)).c_str(), mfu.c_str(), 100 * t.comm_hidden(),
      t.overhead_ms / std::max<int64_t>(1, t.steps));
  const actors::MemoryReport& m = t.memory;
  std::printf(
      "  per rank: model state %s (parameters %s, gradients %s, optimizer state %s), gather "
      "buffers %s, activations %s, peak RSS %s; sent %s per step\n",
      nn::format_bytes(m.model_state()).c_str(), nn::format_bytes(m.parameters).c_str(),
      nn::format_bytes(m.gradients).c_str(), nn::format_bytes(m.optimizer_state).c_str(),
      nn::format_bytes(m.buffers).c_str(), nn::format_bytes(m.activations).c_str(),
      nn::format_bytes(m.peak_rss).c_str(),
      nn::format_bytes(t.sent_bytes / std::max<int64_t>(1, t.steps)).c_str());
  if (t.pipelined > 0) {
    const ParallelConfig& p = config.parallel;
    std::printf(
        "  pipeline bubble %.1f%% of the schedule (%s over %d stages%s and %lld "
        "micro-batches: %.1f%% in theory)\n",
        100 * t.bubble(), actors::pipeline::schedule_name(p.schedule), p.pp,
        p.virtual_stages > 1 ? absl::StrCat(" of ", p.virtual_stages, " chunks").c_str() : "",
        static_cast<long long>(config.gradient_accumulation_steps),
        100 * actors::pipeline::theoretical_bubble(
                  p.pp, static_cast<int>(config.gradient_accumulation_steps), p.virtual_stages));
  }
  if (accuracy)
    std::printf("  task accuracy (held-out addition problems): %.1f%%\n", 100 * *accuracy);
  if (validation.last) {
    std::printf("  %s\n", validation.summary(config.checkpoint).c_str());
  }
  if (!stepper.recoveries().empty()) {
    int64_t rerun = 0;
    for (const RecoveryReport& r : stepper.recoveries())
      rerun += r.steps_lost;
    // The time lost is measured (RecoveringStepper::lost_ms): the failed
    // attempts, the recoveries and the steps run again; under a minute to
    // the hundredth of a second, so that a short one does not read "0s".
    const double lost_s = stepper.lost_ms() / 1000;
    std::printf(
        "  recoveries: %zu (workers lost and replaced), %lld %s run again, %s lost\n",
        stepper.recoveries().size(), static_cast<long long>(rerun), rerun == 1 ? "step" : "steps",
        (lost_s < 60 ? absl::StrFormat("%.2f s", lost_s) : format_duration(lost_s)).c_str());
  }
  if (scaler && !scaler->history().empty()) {
    std::vector<std::string> changes;
    for (const ResizeReport& r : scaler->history())
      changes.push_back(
          absl::StrFormat("dp %d -> %d at step %d (%s)", r.from_dp, r.to_dp, r.step, r.cause));
    std::printf("  resized %zu %s: %s\n", changes.size(), changes.size() == 1 ? "time" : "times",
                cluster::printable(absl::StrJoin(changes, "; ")).c_str());
  }
  std::printf(
      "  weights: %s/model.%s   metrics: %s\n", output_dir.c_str(),
      partitioned
          ? absl::StrCat("json and ", saved.partitions.size(), " partitions (model.part-*.bin)")
                .c_str()
          : "{json,bin}",
      metrics_failure.ok() ? metrics_path.c_str()
                           : absl::StrCat(metrics_path, " (incomplete: writing it failed at step ",
                                          metrics_failed_at, ")")
                                 .c_str());
  // A prompt of the kind the model was trained on: a problem of the
  // synthetic task, or the start of a text.
  std::printf("  try: troupe generate --model %s --prompt \"%s\"\n", output_dir.c_str(),
              config.data.synthetic ? "12+34=" : "The ");
  if (interrupted) {
    std::printf("\ninterrupted after step %lld of %lld: %s\n", static_cast<long long>(last_step),
                static_cast<long long>(steps),
                config.checkpoint.dir.empty()
                    ? "the weights are saved; without checkpoint.dir in the config it cannot "
                      "resume"
                    : absl::StrCat("continue with\n  ", resume_command(all_args)).c_str());
  }
  std::fflush(stdout);
  if (absl::Status s = trainer.stop(); !s.ok()) {
    std::fprintf(stderr, "troupe train: stopping the job's actors: %s\n",
                 std::string(s.message()).c_str());
  }
  if (!metrics_failure.ok()) {
    std::fprintf(stderr,
                 "troupe train: the weights are saved, but the metrics are incomplete: writing "
                 "them failed at step %lld: %s\n",
                 static_cast<long long>(metrics_failed_at),
                 cluster::printable(metrics_failure.message()).c_str());
    return 1;
  }
  return interrupted ? 128 + interrupt.signal() : 0;
}

}  // namespace troupe::trainers
