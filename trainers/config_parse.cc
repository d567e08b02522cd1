// parse_train_config: the top level, the batch rule and troupe's own
// sections (data, parallel, training, checkpoint, fault tolerance). The model
// section is in config_model.cc; DeepSpeed's optimizer, scheduler, precision
// and ZeRO sections are in config_optim.cc.
#include <array>
#include <climits>
#include <numeric>
#include <string>
#include <tuple>

#include "absl/strings/string_view.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "actors/data/addition_task.h"
#include "trainers/config.h"
#include "trainers/config_reader.h"
#include "trainers/config_sections.h"

namespace troupe::trainers {
namespace config_detail {
namespace {

// Top-level keys that parse_train_config reads.
constexpr std::array<absl::string_view, 23> kImplementedKeys = {
    "device",
    "tensorboard",
    "train_batch_size",
    "train_micro_batch_size_per_gpu",
    "gradient_accumulation_steps",
    "gradient_clipping",
    "steps_per_print",
    "optimizer",
    "scheduler",
    "fp16",
    "bf16",
    "bfloat16",
    "zero_optimization",
    "model",
    "data",
    "parallel",
    "training",
    "checkpoint",
    "fault_tolerance",
    "elasticity",
    "tensor_model_parallel_size",
    "pipeline_model_parallel_size",
    "virtual_pipeline_model_parallel_size"};

// Top-level keys of DeepSpeed's config (deepspeed.ai/docs/config-json and
// deepspeed/runtime/config.py) that troupe does not implement: a warning when
// present and not is_inactive().
struct UnimplementedKey {
  absl::string_view name;
  absl::string_view default_json;  // DeepSpeed's default when it asks for nothing; "": none
  absl::string_view hint;          // appended to the warning; "": none
};
constexpr std::array<UnimplementedKey, 40> kUnimplementedKeys = {{
    {"activation_checkpointing", "", "model.recompute_activations is troupe's"},
    {"aio", "", ""},
    {"amp", "", "fp16 and bf16 are troupe's"},
    {"autotuning", "", ""},
    {"comet", "", ""},
    {"communication_data_type", "", ""},
    {"comms_logger", "", ""},
    {"compile", "", ""},
    {"compression_training", "", ""},
    {"csv_monitor", "", "training.metrics_file is troupe's"},
    {"curriculum_learning", "", ""},
    {"data_efficiency", "", ""},
    {"data_types", "", ""},
    {"dataloader_drop_last", "", ""},
    {"disable_allgather", "", ""},
    {"dump_state", "", ""},
    {"eigenvalue", "", ""},
    {"flops_profiler", "", ""},
    {"fp32_allreduce", "", ""},
    {"gradient_predivide_factor", "1.0", ""},
    {"graph_harvesting", "", ""},
    {"hybrid_engine", "", ""},
    {"memory_breakdown", "", ""},
    {"nebula", "", ""},
    {"pipeline", "", "parallel.pp is troupe's"},
    {"prescale_gradients", "", ""},
    {"progressive_layer_drop", "", ""},
    {"quantize_training", "", ""},
    {"seq_parallel_communication_data_type", "", ""},
    {"sequence_parallel_size", "1", ""},
    {"sparse_attention", "", ""},
    {"sparse_gradients", "", ""},
    {"tensor_parallel", "", "parallel.tp is troupe's"},
    {"timers", "", ""},
    {"torch_autocast", "", ""},
    {"use_data_before_expert_parallelism", "", ""},
    {"wall_clock_breakdown", "", ""},
    {"wandb", "", "training.metrics_file is troupe's"},
    {"weight_quantization", "", ""},
    {"zero_allow_untested_optimizer", "", ""},
}};
// Also DeepSpeed's, but only meaningful with ZeRO offload: true is its default.
constexpr UnimplementedKey kZeroForceDsCpuOptimizer = {"zero_force_ds_cpu_optimizer", "true", ""};

// Keys of troupe's sections, for "did you mean 'training.seed'?" when one is
// written at the top level.
constexpr std::array<absl::string_view, 7> kSections = {
    "model", "data", "parallel", "training", "checkpoint", "fault_tolerance", "elasticity"};
constexpr std::array<std::array<absl::string_view, 12>, 7> kSectionKeys = {{
    {"n_layer", "n_head", "n_embd", "seq_len", "vocab_size", "padded_vocab_size",
     "recompute_activations"},
    {"path", "val_path", "synthetic", "shuffle", "prefetch"},
    {"dp", "pp", "tp", "schedule", "virtual_stages", "partition", "partition_method"},
    {"steps", "seed", "log_interval", "metrics_file", "tensorboard_dir", "report_metrics",
     "output_dir", "eval_interval", "eval_samples", "eval_iters", "threads", "peak_flops"},
    {"dir", "interval_steps", "keep", "keep_best", "async"},
    {"enabled", "spare_nodes", "max_failures", "wait_for_node_s", "step_timeout_s"},
    {"enabled", "min_dp", "max_dp", "micro_batch_sizes", "min_gpus", "max_gpus"},
}};
constexpr std::array<absl::string_view, 4> kOptimizerParams = {"lr", "betas", "eps",
                                                               "weight_decay"};

// Where a top-level key that is unknown there probably belongs.
std::string top_level_hint(absl::string_view key, const std::vector<std::string>& known) {
  for (size_t s = 0; s < kSections.size(); ++s) {
    for (absl::string_view k : kSectionKeys[s]) {
      if (!k.empty() && k == key)
        return absl::StrCat(" (did you mean '", kSections[s], ".", k, "'?)");
    }
  }
  for (absl::string_view k : kOptimizerParams) {
    if (k == key) return absl::StrCat(" (did you mean 'optimizer.params.", k, "'?)");
  }
  return did_you_mean(key, known);
}

absl::Status check_top_level(JsonObject& top, const Json& json,
                             std::vector<std::string>* warnings) {
  std::vector<std::string> known;
  for (absl::string_view k : kImplementedKeys) {
    top.find(k);
    known.emplace_back(k);
  }
  auto warn = [&](const UnimplementedKey& u) {
    const size_t before = warnings->size();
    top.warn_unimplemented(u.name, warnings, u.default_json);
    if (warnings->size() > before && !u.hint.empty()) {
      absl::StrAppend(&warnings->back(), " (", u.hint, ")");
    }
    known.emplace_back(u.name);
  };
  for (const UnimplementedKey& u : kUnimplementedKeys)
    warn(u);
  warn(kZeroForceDsCpuOptimizer);
  for (const auto& [key, unused] : json.items()) {
    if (std::find(known.begin(), known.end(), key) != known.end()) continue;
    return config_error(absl::StrCat(key, ": unknown key", top_level_hint(key, known)));
  }
  return absl::OkStatus();
}

absl::Status parse_synthetic(JsonObject& s, const nn::ModelConfig& model,
                             SyntheticTaskConfig* out) {
  TROUPE_CONFIG_RETURN_IF_ERROR(s.read("task", &out->task));
  TROUPE_CONFIG_RETURN_IF_ERROR(s.read("digits", &out->digits, 1, 9));
  TROUPE_CONFIG_RETURN_IF_ERROR(s.read("num_samples", &out->num_samples, 1, kMaxSamples));
  TROUPE_CONFIG_RETURN_IF_ERROR(s.read("seed", &out->seed));
  TROUPE_CONFIG_RETURN_IF_ERROR(s.check_unknown());
  if (out->task != "addition") {
    return config_error(absl::StrCat(s.key_path("task"), ": \"", out->task,
                                     "\" is not a synthetic task; the tasks are: addition"));
  }
  // A held-out problem and its answer must fit in a sample: "07+35=" then "240".
  const actors::AdditionProblem problem = actors::make_addition_problem(0, 0, out->digits);
  const int problem_tokens =
      static_cast<int>(actors::addition_prompt_tokens(problem).size() + problem.answer.size());
  if (model.max_seq_len() < problem_tokens) {
    return config_error(absl::StrCat(
        "model.seq_len: ", model.max_seq_len(), " is too short for ", s.key_path("digits"), " ",
        out->digits, ": a prompt with its answer takes ", problem_tokens, " tokens"));
  }
  constexpr int64_t kMaxTokens = int64_t{1} << 30;  // addition_task.h's limit
  if (out->num_samples > (kMaxTokens - 1) / model.max_seq_len()) {
    return config_error(absl::StrCat(s.key_path("num_samples"), ": ", out->num_samples,
                                     " samples x model.seq_len ", model.max_seq_len(),
                                     " is over the task's 2^30 tokens"));
  }
  const actors::AdditionTaskOptions options = {.digits = out->digits,
                                               .num_samples = out->num_samples,
                                               .seed = out->seed,
                                               .seq_len = model.max_seq_len()};
  if (absl::Status st = actors::validate(options); !st.ok()) {
    return config_error(absl::StrCat(s.path(), ": ", st.message()));
  }
  return absl::OkStatus();
}

// x * y * z, or -1 if it is over int64's range. REQUIRES: all >= 0.
int64_t product(int64_t x, int64_t y, int64_t z) {
  int64_t xy = 0, xyz = 0;
  if (__builtin_mul_overflow(x, y, &xy) || __builtin_mul_overflow(xy, z, &xyz)) return -1;
  return xyz;
}

}  // namespace

absl::Status parse_data(JsonObject& top, TrainConfig* config) {
  DataConfig& d = config->data;
  absl::StatusOr<std::optional<JsonObject>> section = top.section("data");
  if (!section.ok()) return section.status();
  if (!section->has_value()) {
    return config_error(
        "data: missing; give data.path (a dataset made by `troupe data prepare`) or "
        "data.synthetic ({\"task\": \"addition\"})");
  }
  JsonObject& s = **section;
  TROUPE_CONFIG_RETURN_IF_ERROR(s.read("path", &d.path));
  TROUPE_CONFIG_RETURN_IF_ERROR(s.read("val_path", &d.val_path));
  absl::StatusOr<std::optional<JsonObject>> synthetic = s.section("synthetic");
  if (!synthetic.ok()) return synthetic.status();
  TROUPE_CONFIG_RETURN_IF_ERROR(s.read("shuffle", &d.shuffle));
  TROUPE_CONFIG_RETURN_IF_ERROR(s.read("prefetch", &d.prefetch, 0, kMaxPrefetch));
  TROUPE_CONFIG_RETURN_IF_ERROR(s.check_unknown());
  if (!d.val_path.empty() && synthetic->has_value()) {
    return config_error(
        "data.val_path: a synthetic task holds out its own problems (training.eval_samples); "
        "a validation dataset goes with data.path");
  }
  if (!d.path.empty() && synthetic->has_value()) {
    return config_error("data: give one of data.path and data.synthetic, not both");
  }
  if (d.path.empty() && !synthetic->has_value()) {
    return config_error(
        "data: give data.path (a dataset made by `troupe data prepare`) or data.synthetic");
  }
  if (synthetic->has_value()) {
    d.synthetic.emplace();
    TROUPE_CONFIG_RETURN_IF_ERROR(parse_synthetic(**synthetic, config->model, &*d.synthetic));
  }
  return absl::OkStatus();
}

// Which of parallel's keys the config has (where Megatron's names say the
// same).
struct OursGiven {
  bool tp = false, pp = false, virtual_stages = false, schedule = false;
};

// Megatron-LM's names for parallel.tp, parallel.pp and parallel.virtual_stages,
// at the top level as DeepSpeed configs carry them: the same setting, given
// once. A virtual pipeline of 2 or more chunks is Megatron's interleaved
// schedule, which it then is unless parallel.schedule says otherwise.
absl::Status parse_megatron_sizes(JsonObject& top, TrainConfig* config, OursGiven ours_given = {}) {
  ParallelConfig& p = config->parallel;
  std::string unnamed;  // virtual_stages' (no message names it)
  for (auto [megatron, ours, size, key, given_too] :
       {std::tuple{"tensor_model_parallel_size", "tp", &p.tp, &p.tp_key, ours_given.tp},
        std::tuple{"pipeline_model_parallel_size", "pp", &p.pp, &p.pp_key, ours_given.pp},
        std::tuple{"virtual_pipeline_model_parallel_size", "virtual_stages", &p.virtual_stages,
                   &unnamed, ours_given.virtual_stages}}) {
    if (!top.has(megatron)) continue;
    int given = 1;
    TROUPE_CONFIG_RETURN_IF_ERROR(top.read(megatron, &given, 1, kMaxParallel));
    if (given_too && *size != given) {
      return config_error(absl::StrCat(megatron, ": ", given, " != parallel.", ours, " ", *size,
                                       " (the same setting; keep one)"));
    }
    *size = given;
    if (!given_too) *key = megatron;
  }
  if (top.has("virtual_pipeline_model_parallel_size") && p.virtual_stages > 1 &&
      !ours_given.schedule) {
    p.schedule = actors::pipeline::ScheduleKind::kInterleaved;
  }
  return absl::OkStatus();
}

absl::Status parse_parallel(JsonObject& top, TrainConfig* config) {
  ParallelConfig& p = config->parallel;
  absl::StatusOr<std::optional<JsonObject>> section = top.section("parallel");
  if (!section.ok()) return section.status();
  if (!section->has_value()) return parse_megatron_sizes(top, config);
  JsonObject& s = **section;
  TROUPE_CONFIG_RETURN_IF_ERROR(s.read("dp", &p.dp, 1, kMaxParallel));
  TROUPE_CONFIG_RETURN_IF_ERROR(s.read("pp", &p.pp, 1, kMaxParallel));
  TROUPE_CONFIG_RETURN_IF_ERROR(s.read("tp", &p.tp, 1, kMaxParallel));
  std::string schedule = actors::pipeline::schedule_name(p.schedule);
  TROUPE_CONFIG_RETURN_IF_ERROR(s.read("schedule", &schedule));
  TROUPE_CONFIG_RETURN_IF_ERROR(s.read("virtual_stages", &p.virtual_stages, 1, kMaxParallel));
  TROUPE_CONFIG_RETURN_IF_ERROR(s.read("partition", &p.partition));
  TROUPE_CONFIG_RETURN_IF_ERROR(s.read("partition_method", &p.partition_method));
  TROUPE_CONFIG_RETURN_IF_ERROR(s.check_unknown());
  TROUPE_CONFIG_RETURN_IF_ERROR(parse_megatron_sizes(top, config,
                                                     {.tp = s.has("tp"),
                                                      .pp = s.has("pp"),
                                                      .virtual_stages = s.has("virtual_stages"),
                                                      .schedule = s.has("schedule")}));
  if (s.has("schedule")) {
    std::optional<actors::pipeline::ScheduleKind> kind = actors::pipeline::parse_schedule(schedule);
    if (!kind) {
      return config_error(absl::StrCat("parallel.schedule: \"", schedule,
                                       "\" is not a schedule; one of \"gpipe\", \"1f1b\", "
                                       "\"interleaved\""));
    }
    p.schedule = *kind;
  }
  if (p.partition_method != "parameters" && p.partition_method != "uniform") {
    return config_error(absl::StrCat("parallel.partition_method: \"", p.partition_method,
                                     "\" is not a method; one of \"parameters\" (balanced by "
                                     "parameter count), \"uniform\""));
  }
  if ((p.schedule == actors::pipeline::ScheduleKind::kInterleaved) != (p.virtual_stages > 1)) {
    return config_error(absl::StrCat("parallel.virtual_stages: ", p.virtual_stages,
                                     " with parallel.schedule \"",
                                     actors::pipeline::schedule_name(p.schedule),
                                     "\"; \"interleaved\" takes 2 or more model chunks a stage, "
                                     "the others 1"));
  }
  // Interleaved: a count for each model chunk, in the order of the virtual
  // stages (chunk c of stage s is virtual stage c x pp + s).
  if (const int stages = p.pp * p.virtual_stages;
      !p.partition.empty() && static_cast<int>(p.partition.size()) != stages) {
    return config_error(absl::StrCat(
        "parallel.partition: ", p.partition.size(), " stages' blocks for parallel.pp ", p.pp,
        p.virtual_stages > 1 ? absl::StrCat(" x ", p.virtual_stages, " virtual_stages") : ""));
  }
  return absl::OkStatus();
}

// What the pipeline (pp > 1) and tensor parallelism (tp > 1) do not run yet,
// once every section is read: named, with what does run.
absl::Status check_model_parallel(const TrainConfig& config) {
  const ParallelConfig& p = config.parallel;
  if (p.pp > config.model.num_layers()) {
    return config_error(absl::StrCat("parallel.pp: ", p.pp, " stages for ",
                                     config.model.num_layers(),
                                     " layers (model.n_layer); each stage holds a block at least"));
  }
  if (p.schedule == actors::pipeline::ScheduleKind::kInterleaved) {
    if (p.pp < 2) {
      return config_error(absl::StrCat("parallel.schedule \"interleaved\" with parallel.pp ", p.pp,
                                       ": it interleaves the chunks of 2 stages or more"));
    }
    if (p.pp * p.virtual_stages > config.model.num_layers()) {
      return config_error(absl::StrCat(
          "parallel.virtual_stages: ", p.pp, " stages of ", p.virtual_stages, " model chunks for ",
          config.model.num_layers(), " layers (model.n_layer); each chunk holds a block at least"));
    }
    if (config.gradient_accumulation_steps % p.pp != 0) {
      return config_error(absl::StrCat(
          "parallel.schedule \"interleaved\": gradient_accumulation_steps (",
          config.gradient_accumulation_steps, ", the micro-batches a step) must be a multiple of ",
          "parallel.pp (", p.pp, "), as Megatron's interleaved schedule requires"));
    }
  }
  if (p.tp > 1) {
    if (absl::Status s = nn::validate_slice(config.model, {.rank = 0, .size = p.tp}); !s.ok()) {
      return config_error(absl::StrCat("parallel.tp: ", p.tp, ": ", s.message()));
    }
  }
  if (p.pp == 1 && p.tp == 1) return absl::OkStatus();
  const char* missing = nullptr;
  if (config.zero.stage > 1) missing = "zero_optimization.stage above 1";
  if (config.elasticity.enabled) missing = "elasticity.enabled";
  if (missing != nullptr) {
    const std::string what =
        p.pp > 1 ? absl::StrCat("parallel.pp: ", p.pp) : absl::StrCat("parallel.tp: ", p.tp);
    return config_error(
        absl::StrCat(what, " with ", missing,
                     " is not implemented yet; pipeline and tensor parallelism run "
                     "with DDP or ZeRO-1 over dp (zero_optimization.stage 0 or 1), without "
                     "elasticity"));
  }
  return absl::OkStatus();
}

absl::Status parse_training(JsonObject& top, TrainConfig* config) {
  TrainingConfig& t = config->training;
  absl::StatusOr<std::optional<JsonObject>> section = top.section("training");
  if (!section.ok()) return section.status();
  bool has_log_interval = false;
  if (section->has_value()) {
    JsonObject& s = **section;
    TROUPE_CONFIG_RETURN_IF_ERROR(s.read("steps", &t.steps, 0));
    TROUPE_CONFIG_RETURN_IF_ERROR(s.read("seed", &t.seed));
    has_log_interval = s.has("log_interval");
    TROUPE_CONFIG_RETURN_IF_ERROR(s.read("log_interval", &t.log_interval, 1));
    TROUPE_CONFIG_RETURN_IF_ERROR(s.read("metrics_file", &t.metrics_file));
    TROUPE_CONFIG_RETURN_IF_ERROR(s.read("tensorboard_dir", &t.tensorboard_dir));
    TROUPE_CONFIG_RETURN_IF_ERROR(s.read("report_metrics", &t.report_metrics));
    TROUPE_CONFIG_RETURN_IF_ERROR(s.read("init_from", &t.init_from));
    TROUPE_CONFIG_RETURN_IF_ERROR(s.read("output_dir", &t.output_dir));
    TROUPE_CONFIG_RETURN_IF_ERROR(s.read("eval_interval", &t.eval_interval, 0));
    TROUPE_CONFIG_RETURN_IF_ERROR(s.read("eval_samples", &t.eval_samples, 0, kMaxEvalSamples));
    TROUPE_CONFIG_RETURN_IF_ERROR(s.read("eval_iters", &t.eval_iters, 0));
    TROUPE_CONFIG_RETURN_IF_ERROR(s.read("peak_flops", &t.peak_flops, 0, 1e21));
    TROUPE_CONFIG_RETURN_IF_ERROR(s.read("threads", &t.threads, 0, kMaxThreads));
    TROUPE_CONFIG_RETURN_IF_ERROR(s.check_unknown());
  }
  // DeepSpeed's tensorboard section: its event files in output_path/job_name.
  absl::StatusOr<std::optional<JsonObject>> tensorboard = top.section("tensorboard");
  if (!tensorboard.ok()) return tensorboard.status();
  if (tensorboard->has_value()) {
    JsonObject& tb = **tensorboard;
    bool enabled = false;
    std::string output_path, job_name = "DeepSpeedJobName";
    TROUPE_CONFIG_RETURN_IF_ERROR(tb.read("enabled", &enabled));
    TROUPE_CONFIG_RETURN_IF_ERROR(tb.read("output_path", &output_path));
    TROUPE_CONFIG_RETURN_IF_ERROR(tb.read("job_name", &job_name));
    TROUPE_CONFIG_RETURN_IF_ERROR(tb.check_unknown());
    if (enabled) {
      const std::string dir = absl::StrCat(output_path.empty() ? "." : output_path, "/", job_name);
      if (!t.tensorboard_dir.empty() && t.tensorboard_dir != dir) {
        return config_error(absl::StrCat("tensorboard: writes to ", dir,
                                         " but training.tensorboard_dir is ", t.tensorboard_dir,
                                         "; give one of them"));
      }
      t.tensorboard_dir = dir;
    }
  }
  // DeepSpeed's steps_per_print is the same setting.
  int steps_per_print = 0;
  TROUPE_CONFIG_RETURN_IF_ERROR(top.read("steps_per_print", &steps_per_print, 1));
  if (steps_per_print > 0) {
    if (has_log_interval && steps_per_print != t.log_interval) {
      return config_error(absl::StrCat("steps_per_print: ", steps_per_print,
                                       " != training.log_interval ", t.log_interval,
                                       " (the same setting; keep one)"));
    }
    t.log_interval = steps_per_print;
  }
  return absl::OkStatus();
}

absl::Status parse_checkpoint(JsonObject& top, TrainConfig* config) {
  CheckpointConfig& c = config->checkpoint;
  absl::StatusOr<std::optional<JsonObject>> section = top.section("checkpoint");
  if (!section.ok()) return section.status();
  if (!section->has_value()) return absl::OkStatus();
  JsonObject& s = **section;
  // DeepSpeed's own `checkpoint` keys: troupe verifies every checkpoint and
  // loads any layout (what load_universal asks for) without them.
  s.warn_unimplemented("tag_validation", &config->warnings, "\"Warn\"");
  s.warn_unimplemented("load_universal", &config->warnings, "");
  s.warn_unimplemented("use_node_local_storage", &config->warnings, "");
  s.warn_unimplemented("parallel_write", &config->warnings, "");
  TROUPE_CONFIG_RETURN_IF_ERROR(s.read("dir", &c.dir));
  TROUPE_CONFIG_RETURN_IF_ERROR(s.read("interval_steps", &c.interval_steps, 0));
  TROUPE_CONFIG_RETURN_IF_ERROR(s.read("keep", &c.keep, 1, kMaxCheckpointsKept));
  TROUPE_CONFIG_RETURN_IF_ERROR(s.read("keep_best", &c.keep_best));
  TROUPE_CONFIG_RETURN_IF_ERROR(s.read("async", &c.async));
  TROUPE_CONFIG_RETURN_IF_ERROR(s.check_unknown());
  if (c.interval_steps > 0 && c.dir.empty()) {
    return config_error(absl::StrCat(s.key_path("dir"), ": missing; ", s.key_path("interval_steps"),
                                     " ", c.interval_steps, " saves a checkpoint to it"));
  }
  if (c.keep_best && (c.dir.empty() || config->data.val_path.empty())) {
    return config_error(absl::StrCat(
        s.key_path("keep_best"), ": keeps the checkpoint of the best validation loss, so it needs ",
        c.dir.empty() ? s.key_path("dir") : std::string("data.val_path"), " too"));
  }
  return absl::OkStatus();
}

absl::Status parse_fault_tolerance(JsonObject& top, TrainConfig* config) {
  FaultToleranceConfig& f = config->fault_tolerance;
  absl::StatusOr<std::optional<JsonObject>> section = top.section("fault_tolerance");
  if (!section.ok()) return section.status();
  if (!section->has_value()) return absl::OkStatus();
  JsonObject& s = **section;
  TROUPE_CONFIG_RETURN_IF_ERROR(s.read("enabled", &f.enabled));
  TROUPE_CONFIG_RETURN_IF_ERROR(s.read("spare_nodes", &f.spare_nodes, 0, kMaxSpareNodes));
  TROUPE_CONFIG_RETURN_IF_ERROR(s.read("max_failures", &f.max_failures, 0, kMaxFailures));
  TROUPE_CONFIG_RETURN_IF_ERROR(s.read("wait_for_node_s", &f.wait_for_node_s, 0, 86400));
  TROUPE_CONFIG_RETURN_IF_ERROR(s.read("step_timeout_s", &f.step_timeout_s, 1, 86400));
  return s.check_unknown();
}

absl::Status parse_batch(JsonObject& top, TrainConfig* config) {
  constexpr absl::string_view kBatch = "train_batch_size";
  constexpr absl::string_view kMicro = "train_micro_batch_size_per_gpu";
  constexpr absl::string_view kAccumulation = "gradient_accumulation_steps";
  std::optional<int64_t> batch, micro, accumulation;
  TROUPE_CONFIG_RETURN_IF_ERROR(top.read(kBatch, &batch, 1, INT_MAX));
  TROUPE_CONFIG_RETURN_IF_ERROR(top.read(kMicro, &micro, 1, INT_MAX));
  TROUPE_CONFIG_RETURN_IF_ERROR(top.read(kAccumulation, &accumulation, 1, INT_MAX));
  const int64_t dp = config->parallel.dp;
  // DeepSpeed's _set_batch_related_parameters, with exact division.
  auto not_divisible = [&](absl::string_view derived, int64_t divisor, std::string divisor_text) {
    return config_error(absl::StrCat(kBatch, " ", *batch, " is not a multiple of ", divisor_text,
                                     " = ", divisor, ", so ", derived,
                                     " would not be a whole number"));
  };
  if (batch && micro && accumulation) {
    // Checked below.
  } else if (batch && micro) {
    const int64_t per_step = *micro * dp;
    if (*batch % per_step != 0) {
      return not_divisible(kAccumulation, per_step,
                           absl::StrCat(kMicro, " ", *micro, " x dp ", dp));
    }
    accumulation = *batch / per_step;
  } else if (batch && accumulation) {
    const int64_t per_sample = *accumulation * dp;
    if (*batch % per_sample != 0) {
      return not_divisible(kMicro, per_sample,
                           absl::StrCat(kAccumulation, " ", *accumulation, " x dp ", dp));
    }
    micro = *batch / per_sample;
  } else if (micro && accumulation) {
    batch = product(*micro, *accumulation, dp);
  } else if (batch) {
    if (*batch % dp != 0) return not_divisible(kMicro, dp, "dp");
    accumulation = 1;
    micro = *batch / dp;
  } else if (micro) {
    accumulation = 1;
    batch = product(*micro, 1, dp);
  } else if (accumulation) {
    return config_error(absl::StrCat(kBatch, ": missing; ", kAccumulation,
                                     " alone does not set the batch: give ", kBatch, " or ", kMicro,
                                     " too"));
  } else {
    return config_error(absl::StrCat(kBatch, ": missing; give ", kBatch, " or ", kMicro,
                                     " (or both, with ", kAccumulation, "): ", kBatch, " = ",
                                     kMicro, " x ", kAccumulation, " x dp"));
  }
  // The product, checked: one over train_batch_size's bound (the loaders and
  // stages count samples in an int) is refused as such, whether it was given
  // or derived, before it is compared with a given train_batch_size.
  const int64_t expected = product(*micro, *accumulation, dp);
  if (expected < 0 || expected > INT_MAX) {
    return config_error(absl::StrCat(
        kBatch, ": ", kMicro, " ", *micro, " x ", kAccumulation, " ", *accumulation,
        " x parallel.dp ", dp, " = ", expected < 0 ? "more than 2^63" : absl::StrCat(expected),
        " is over ", INT_MAX, " (2^31 - 1), the largest ", kBatch, "; make them smaller"));
  }
  if (*batch != expected) {
    return config_error(absl::StrCat(kBatch, " ", *batch, " != ", kMicro, " ", *micro, " x ",
                                     kAccumulation, " ", *accumulation, " x dp ", dp, " = ",
                                     expected));
  }
  config->train_batch_size = *batch;
  config->micro_batch_size = *micro;
  config->gradient_accumulation_steps = *accumulation;
  return absl::OkStatus();
}

// `device`: "auto", "cpu" or "cuda".
absl::Status parse_device(JsonObject& top, TrainConfig* config) {
  std::string device = device_choice_name(config->device);
  TROUPE_CONFIG_RETURN_IF_ERROR(top.read("device", &device));
  if (std::optional<DeviceChoice> choice = parse_device_choice(device)) {
    config->device = *choice;
    return absl::OkStatus();
  }
  std::string hint;
  if (device.starts_with("cuda:")) {
    hint = " (a job's ranks each get a GPU of their own from their worker: name no index)";
  } else if (device == "gpu") {
    hint = " (did you mean \"cuda\"?)";
  }
  return config_error(absl::StrCat("device: \"", device,
                                   "\" is not a device; one of \"auto\", \"cpu\", \"cuda\"", hint));
}

}  // namespace config_detail

std::optional<DeviceChoice> parse_device_choice(std::string_view name) {
  for (DeviceChoice choice : {DeviceChoice::kAuto, DeviceChoice::kCpu, DeviceChoice::kCuda}) {
    if (name == device_choice_name(choice)) return choice;
  }
  return std::nullopt;
}

const char* device_choice_name(DeviceChoice choice) {
  switch (choice) {
    case DeviceChoice::kAuto:
      return "auto";
    case DeviceChoice::kCpu:
      return "cpu";
    case DeviceChoice::kCuda:
      return "cuda";
  }
  return "auto";
}

absl::StatusOr<TrainConfig> parse_train_config(const std::string& json_text) {
  using namespace config_detail;
  absl::StatusOr<Json> json = parse_json(json_text);
  if (!json.ok()) return json.status();
  if (!json->is_object()) {
    return config_error(
        absl::StrCat("config: expected a JSON object at the top level, found ", describe(*json)));
  }
  TrainConfig config;
  JsonObject top(*json, "");
  TROUPE_CONFIG_RETURN_IF_ERROR(check_top_level(top, *json, &config.warnings));
  TROUPE_CONFIG_RETURN_IF_ERROR(parse_device(top, &config));
  TROUPE_CONFIG_RETURN_IF_ERROR(parse_model(top, &config));
  TROUPE_CONFIG_RETURN_IF_ERROR(parse_data(top, &config));
  TROUPE_CONFIG_RETURN_IF_ERROR(parse_parallel(top, &config));
  TROUPE_CONFIG_RETURN_IF_ERROR(parse_training(top, &config));
  TROUPE_CONFIG_RETURN_IF_ERROR(parse_checkpoint(top, &config));
  TROUPE_CONFIG_RETURN_IF_ERROR(parse_fault_tolerance(top, &config));
  TROUPE_CONFIG_RETURN_IF_ERROR(parse_batch(top, &config));
  TROUPE_CONFIG_RETURN_IF_ERROR(parse_elasticity(top, &config));
  TROUPE_CONFIG_RETURN_IF_ERROR(parse_optimizer(top, &config));
  TROUPE_CONFIG_RETURN_IF_ERROR(parse_scheduler(top, &config));
  TROUPE_CONFIG_RETURN_IF_ERROR(parse_precision(top, &config));
  TROUPE_CONFIG_RETURN_IF_ERROR(parse_zero(top, &config));
  TROUPE_CONFIG_RETURN_IF_ERROR(check_model_parallel(config));
  if (const std::vector<int64_t>& blocks = config.parallel.partition; !blocks.empty()) {
    const int64_t sum = std::accumulate(blocks.begin(), blocks.end(), int64_t{0});
    if (sum != config.model.num_layers()) {
      return config_error(absl::StrCat("parallel.partition: its stages hold ", sum,
                                       " blocks in all; the model has ", config.model.num_layers(),
                                       " (model.n_layer)"));
    }
  }
  return config;
}

}  // namespace troupe::trainers
