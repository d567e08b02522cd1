// The training configuration: a DeepSpeed-style JSON file plus troupe's own
// sections (`model`, `data`, `parallel`, `training`, `checkpoint`), parsed and checked in one
// place so that a bad file fails before any actor starts (docs/training.md;
// every key, its default and DeepSpeed's keys that are not implemented:
// docs/config.md).
//
//   {
//     "train_batch_size": 64, "train_micro_batch_size_per_gpu": 16,
//     "gradient_accumulation_steps": 2, "gradient_clipping": 1.0,
//     "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "weight_decay": 0.01}},
//     "scheduler": {"type": "WarmupCosineLR", "params": {"warmup_num_steps": 50,
//                                                        "total_num_steps": 1000}},
//     "zero_optimization": {"stage": 0, "reduce_bucket_size": 500000000},
//     "model": {"n_layer": 2, "n_head": 4, "n_embd": 64, "seq_len": 32, "vocab_size": 256},
//     "data": {"synthetic": {"task": "addition", "digits": 2}},
//     "parallel": {"dp": 2},
//     "training": {"steps": 500, "seed": 1234}
//   }
//
// train_batch_size = train_micro_batch_size_per_gpu x gradient_accumulation_steps x dp
// (DeepSpeed's rule; any two of the three batch keys determine the third).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "actors/pipeline/schedule_kind.h"
#include "nn/model/layout.h"
#include "nn/model/model.h"
#include "nn/optim/adamw.h"
#include "nn/optim/loss_scaler.h"
#include "nn/optim/lr_schedule.h"
#include "nn/optim/sgd.h"

namespace troupe::trainers {

// The bounds of a config (docs/config.md, docs/security.md): beyond them a
// value is refused naming the bound, not tried.
inline constexpr int64_t kMaxConfigBytes = 16 << 20;  // the config file
inline constexpr int kMaxLayers = 1024;
inline constexpr int kMaxHeads = 1024;
inline constexpr int kMaxChannels = 1 << 16;
inline constexpr int kMaxSeqLen = 1 << 20;
inline constexpr int kMaxVocab = 1 << 24;
inline constexpr int kMaxParallel = 4096;  // each of dp, pp, tp
inline constexpr int kMaxThreads = 512;
inline constexpr int kMaxPrefetch = 1024;
inline constexpr int64_t kMaxSamples = int64_t{1} << 40;
inline constexpr int kMaxEvalSamples = 1 << 20;
inline constexpr int kMaxLocalWorkers = 64;  // troupe train --local
inline constexpr int kMaxCheckpointsKept = 1 << 16;

// `model`: nn::ModelConfig (the one model config type of troupe), read and
// written by its codec (nn/model/config_json.h): {"type": "gpt2", n_layer,
// n_head, n_embd, seq_len, vocab_size, padded_vocab_size} or {"type":
// "llama", Hugging Face's LlamaConfig keys}; without "type" GPT-2's. The
// sequence length (seq_len, max_position_embeddings) is T of every sample.
// padded_vocab_size absent or 0: vocab_size rounded up to a multiple of 64
// (the parsed config holds the resolved value, while a TrainConfig built in
// code keeps nn's meaning of 0: no padding). recompute_activations, in the
// same section, is nn::ModelOptions'. A section that names no "type" and
// only some GPT-2 keys changes those of the default: a GPT-2 of 2 layers, 4
// heads, 64 channels, seq_len 64, 256 byte tokens.
inline constexpr nn::ModelConfig kDefaultModel = nn::GPTConfig{.max_seq_len = 64,
                                                               .vocab_size = 256,
                                                               .padded_vocab_size = 256,
                                                               .num_layers = 2,
                                                               .num_heads = 4,
                                                               .channels = 64};
// padded_vocab_size as the config resolves 0: vocab_size rounded up to 64.
int default_padded_vocab(int vocab_size);

// `data.synthetic`: a generated task instead of a dataset file.
struct SyntheticTaskConfig {
  std::string task = "addition";  // the only task so far
  int digits = 2;                 // operand digits
  int64_t num_samples = 100000;   // samples in the generated training set
  uint64_t seed = 1;              // the task's own seed (problems, held-out set)
};

// `data`: exactly one of `path` (a token dataset, actors/data/token_dataset.h:
// PATH.bin + PATH.json) or `synthetic`.
struct DataConfig {
  std::string path;
  // A validation dataset (`troupe data prepare --val-files`): its loss and bits per byte are
  // computed every training.eval_interval steps and at the end. Empty: none.
  std::string val_path;
  std::optional<SyntheticTaskConfig> synthetic;
  bool shuffle = true;  // epoch-seeded permutation (else in order)
  int prefetch = 2;     // micro-batches the loader prepares ahead
};

// `parallel`: the mesh dp x pp x tp (docs/parallelism.md).
struct ParallelConfig {
  int dp = 1;
  int pp = 1;
  int tp = 1;
  // The pipeline schedule (actors/pipeline/schedule.h; the config names it
  // "gpipe", "1f1b" or "interleaved"); the model chunks a stage holds under "interleaved" (2 or
  // more; 1 otherwise); the blocks of each stage, pp entries summing to
  // model.n_layer (pp x virtual_stages under "interleaved"); without them,
  // how the blocks are split (DeepSpeed's partition_method): "parameters"
  // (balanced by parameter count) or "uniform" (evenly, as Megatron does).
  actors::pipeline::ScheduleKind schedule = actors::pipeline::ScheduleKind::kOneFOneB;
  int virtual_stages = 1;
  std::vector<int64_t> partition;
  std::string partition_method = "parameters";
  // The keys the config gave pp and tp under, for messages: troupe's, or
  // Megatron's top-level name when the config used that. (dp has one key,
  // parallel.dp.)
  std::string pp_key = "parallel.pp";
  std::string tp_key = "parallel.tp";
};

enum class OptimizerType { kAdamW, kSgd };

// `optimizer`: {"type": "AdamW" | "Adam" (decoupled decay, as AdamW) | "SGD",
//               "params": {"lr", "betas": [b1, b2], "eps", "weight_decay", "momentum",
//                          "nesterov", "dampening"}}
struct OptimizerConfig {
  OptimizerType type = OptimizerType::kAdamW;
  nn::AdamWConfig adamw;
  nn::SgdConfig sgd;
  float lr() const { return type == OptimizerType::kAdamW ? adamw.lr : sgd.lr; }
};

// `fp16`: {"enabled", "loss_scale" (0: dynamic), "initial_scale_power",
//          "loss_scale_window", "hysteresis", "consecutive_hysteresis", "min_loss_scale"}
struct Fp16Config {
  bool enabled = false;
  double static_loss_scale = 0;  // "loss_scale": 0 means dynamic
  nn::LossScalerConfig dynamic;
};

// `scheduler`: {"type": "WarmupLR" | "WarmupDecayLR" | "WarmupCosineLR",
//               "params": {...}} with DeepSpeed's params and defaults, as read
// (WarmupCosineLR's base_lr is optimizer.params.lr); std::monostate: no
// scheduler, a constant optimizer.params.lr. TrainConfig::lr_schedule is built
// from it; to_json writes it back.
using SchedulerConfig = std::variant<std::monostate, nn::WarmupLrConfig, nn::WarmupDecayLrConfig,
                                     nn::WarmupCosineLrConfig>;

// `zero_optimization` (DeepSpeed's keys and defaults; docs/zero.md): stage 0
// is DDP, 1-3 partition the optimizer state, the gradients, the parameters.
struct ZeroConfig {
  int stage = 0;
  int64_t reduce_bucket_size = 500000000;  // elements, as DeepSpeed counts them
  bool overlap_comm = true;
  bool contiguous_gradients = true;  // always so: each rank's gradients are one contiguous part
  // Stage 3 (elements).
  int64_t stage3_prefetch_bucket_size = 50000000;
  int64_t stage3_param_persistence_threshold = 100000;
  int64_t stage3_max_live_parameters = 1000000000;
  bool stage3_gather_16bit_weights_on_model_save = false;
};

// `training` (troupe's): how long, what is written where.
struct TrainingConfig {
  int64_t steps = 0;         // optimizer steps; 0: one epoch of the data
  uint64_t seed = 1234;      // parameters' initialisation and the data order
  int log_interval = 1;      // steps between progress lines ("steps_per_print" too)
  std::string metrics_file;  // JSONL, a line per step; empty: none
  // Where TensorBoard event files go (a file per run, scalars by step: trainers/tensorboard.h);
  // empty: none. DeepSpeed's tensorboard {enabled, output_path, job_name} sets it.
  std::string tensorboard_dir;
  // Whether the driver reports each step's values to the head (its /metrics, its dashboard and
  // `troupe status`: trainers/job_metrics.h). Off costs the run nothing but its visibility.
  bool report_metrics = true;
  std::string output_dir;  // final weights (and metrics, if metrics_file is empty)
  int eval_interval = 0;   // steps between task-accuracy evaluations; 0: at the end
  int eval_samples = 200;  // held-out problems per evaluation (synthetic tasks)
  // Validation batches (of the micro-batch size, over all data-parallel ranks) per evaluation, as
  // nanoGPT's eval_iters; 0: the whole validation split.
  int64_t eval_iters = 0;
  // The peak FLOP/s of one rank, the denominator of MFU (an H100's 989e12 for bf16, say). 0: on the
  // CPU, a core's measured SGEMM peak (nn/cpu_peak.h) times the rank's compute threads.
  double peak_flops = 0;
  int threads = 0;  // compute threads per replica; 0: cores / dp
  // Pretrained weights to start from (a safetensors file or a Hugging Face model
  // directory; docs/models.md), their config checked against `model`; empty:
  // the seed's initialisation. A resumed run continues from its checkpoint.
  std::string init_from;
};

// `checkpoint` (troupe's; docs/checkpoint.md): a checkpoint every
// interval_steps steps into dir/step-NNNNNNNN/, the newest `keep` kept,
// written in the background while training goes on (async) or with the
// step waiting for it. `troupe train --resume` continues from dir/latest.
struct CheckpointConfig {
  std::string dir;             // required when interval_steps > 0 (and for --resume)
  int64_t interval_steps = 0;  // 0: no periodic checkpoints
  int keep = 2;
  // Also keep the checkpoint of the best validation loss so far (data.val_path), whatever `keep`
  // rotates out: DIR/best names it.
  bool keep_best = false;
  bool async = true;
};

// `fault_tolerance` (troupe's; docs/fault_tolerance.md): when enabled, a lost
// worker (killed, hung, or its machine gone) costs the step in flight, not
// the job. The lost actors are replaced - on a spare node, on any node with
// room, or on one that joins within wait_for_node_s - their state restored
// from a surviving replica, and the step run again; at most max_failures
// times in a run. A step that takes longer than step_timeout_s counts as a
// lost worker. `troupe train --local N` starts spare_nodes more workers.
inline constexpr int kMaxSpareNodes = 64;
inline constexpr int kMaxFailures = 1 << 20;
struct FaultToleranceConfig {
  bool enabled = false;
  int spare_nodes = 0;
  int max_failures = 3;
  double wait_for_node_s = 60;
  double step_timeout_s = 600;
};

// `elasticity` (troupe's, with DeepSpeed's keys where they mean the same;
// docs/elasticity.md): the job's dp may change while it runs, between
// min_dp and max_dp ("min_gpus", "max_gpus": one rank a GPU), always with
// the same train_batch_size. At each size a rank's micro-batch is the
// largest of micro_batch_sizes that splits the global batch evenly
// (elastic_batch.h); empty: any size up to train_micro_batch_size_per_gpu.
struct ElasticityConfig {
  bool enabled = false;
  int min_dp = 1;
  int max_dp = kMaxParallel;
  std::vector<int64_t> micro_batch_sizes;  // ascending, distinct; [] as absent
};

// `device`: where the stages compute (docs/gpu.md). "auto" (the default): "cuda" when every
// worker of the cluster offers a GPU, else "cpu" (resolve_device, trainers/job_device.h).
enum class DeviceChoice { kAuto, kCpu, kCuda };
const char* device_choice_name(DeviceChoice choice);  // "auto", "cpu", "cuda"
// The choice `name` names (device_choice_name's inverse); nullopt for any other text.
std::optional<DeviceChoice> parse_device_choice(std::string_view name);

struct TrainConfig {
  DeviceChoice device = DeviceChoice::kAuto;
  int64_t train_batch_size = 0;
  int64_t micro_batch_size = 0;  // train_micro_batch_size_per_gpu
  int64_t gradient_accumulation_steps = 0;
  double gradient_clipping = 0;  // 0: none
  OptimizerConfig optimizer;
  nn::LrSchedule lr_schedule = nn::LrSchedule::constant(1e-3f);  // the rate of every step
  SchedulerConfig scheduler;  // what `lr_schedule` was built from
  Fp16Config fp16;
  bool bf16 = false;  // "bf16": {"enabled": true}
  ZeroConfig zero;
  nn::ModelConfig model = kDefaultModel;
  nn::ModelOptions model_options;  // model.recompute_activations
  DataConfig data;
  ParallelConfig parallel;
  TrainingConfig training;
  CheckpointConfig checkpoint;
  FaultToleranceConfig fault_tolerance;
  ElasticityConfig elasticity;
  // For the caller to print, a line each naming the key: DeepSpeed keys that
  // were present but are not implemented ("KEY is not implemented by troupe;
  // ignored"), troupe sections not implemented yet ("checkpoint is not
  // implemented yet; ignored"), and settings that are legal but probably not
  // meant (a WarmupLR without warmup_max_lr, whose default 0.001 is not
  // optimizer.params.lr). Not part of to_json.
  std::vector<std::string> warnings;
};

// Parses and checks a config; absent keys (and keys whose value is null, as
// in DeepSpeed) take their defaults. InvalidArgument whose message starts
// with the key's JSON path ("optimizer.params.betas: ...") for: an unknown
// key (with "did you mean 'x'?" when a known key is close), a value of the
// wrong type or out of range, batch sizes that do not satisfy the rule above
// (or leave it undetermined), a feature that is not implemented yet (ZeRO
// stage 2 or 3, or elasticity, with pp or tp > 1, an optimizer or scheduler
// type other than those above), fp16 and bf16 both enabled, a model its
// architecture's validate() rejects, `data` with neither or both of path and synthetic, a key given
// twice. Malformed JSON: "line L, column C: invalid JSON: ...". Keys that
// DeepSpeed knows but troupe does not implement are warnings, not errors
// (docs/config.md lists them). Does not touch the file system (see
// check_data_exists).
[[nodiscard]] absl::StatusOr<TrainConfig> parse_train_config(const std::string& json_text);
// Reads `path` and parses it; NotFound naming the file if it cannot be read;
// parse_train_config's errors with "PATH: " before them.
[[nodiscard]] absl::StatusOr<TrainConfig> load_train_config(const std::string& path);
// A warning when the run's steps (training.steps, which --steps overrides)
// and its scheduler's total_num_steps (WarmupDecayLR, WarmupCosineLR) are
// both set and differ, naming both and what the rate does then; nullopt
// otherwise.
std::optional<std::string> steps_schedule_mismatch(const TrainConfig& config);
// OK when data.path (and data.val_path) is empty, names a file (llm.c's format, checked when
// opened), or PATH.bin and PATH.json both exist (relative paths from the
// working directory); NotFound naming the key and the missing files otherwise.
[[nodiscard]] absl::Status check_data_exists(const TrainConfig& config);
// The config back as JSON, indented (every key, defaults filled in, in the
// order docs/config.md lists them; steps_per_print as training.log_interval):
// what a run records beside its metrics. parse_train_config(to_json(c))
// gives c again, warnings aside.
std::string to_json(const TrainConfig& config);

}  // namespace troupe::trainers
