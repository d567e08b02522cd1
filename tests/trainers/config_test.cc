// The training config (trainers/config.h): parsing, DeepSpeed's batch rule
// and schedules, every error class naming its key, warnings for DeepSpeed
// keys troupe does not implement, to_json round trips, and the example
// configs in examples/configs/.
#include "trainers/config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace troupe::trainers {
namespace {

using nlohmann::json;

// A valid config that the tests patch.
constexpr const char* kBase = R"({
  "train_batch_size": 32,
  "train_micro_batch_size_per_gpu": 16,
  "gradient_accumulation_steps": 1,
  "optimizer": {"type": "AdamW", "params": {"lr": 0.003}},
  "model": {"n_layer": 2, "n_head": 4, "n_embd": 64, "seq_len": 32, "vocab_size": 256},
  "data": {"synthetic": {"task": "addition", "digits": 2}},
  "parallel": {"dp": 2},
  "training": {"steps": 100}
})";

// kBase with an RFC 7386 merge patch applied (null removes a key).
std::string patched(const std::string& patch) {
  json config = json::parse(kBase);
  config.merge_patch(json::parse(patch));
  return config.dump();
}

TrainConfig parse_ok(const std::string& text) {
  absl::StatusOr<TrainConfig> config = parse_train_config(text);
  EXPECT_TRUE(config.ok()) << config.status() << "\n" << text;
  return config.ok() ? *std::move(config) : TrainConfig();
}

// The message of parsing `text`, which must fail with InvalidArgument.
std::string error_of(const std::string& text) {
  absl::StatusOr<TrainConfig> config = parse_train_config(text);
  EXPECT_FALSE(config.ok()) << text;
  if (config.ok()) return "";
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument) << config.status();
  return std::string(config.status().message());
}

// Expects the patched config to fail with a message that starts with `key`
// and contains `text`.
void expect_error(const std::string& patch, const std::string& key, const std::string& text) {
  const std::string message = error_of(patched(patch));
  EXPECT_TRUE(absl::StartsWith(message, key + " ") || absl::StartsWith(message, key + ":"))
      << "message \"" << message << "\" does not start with " << key << " (patch " << patch << ")";
  EXPECT_TRUE(absl::StrContains(message, text))
      << "message \"" << message << "\" lacks \"" << text << "\" (patch " << patch << ")";
}

bool has_warning(const TrainConfig& c, const std::string& text) {
  return std::any_of(c.warnings.begin(), c.warnings.end(),
                     [&](const std::string& w) { return absl::StrContains(w, text); });
}

std::string warnings_of(const TrainConfig& c) {
  std::string all;
  for (const std::string& w : c.warnings)
    absl::StrAppend(&all, "\n  ", w);
  return all;
}

// ---- a full config -----------------------------------------------------------

TEST(TrainConfigTest, ParsesEveryImplementedKey) {
  const TrainConfig c = parse_ok(R"({
    "train_batch_size": 64, "train_micro_batch_size_per_gpu": 16,
    "gradient_accumulation_steps": 2, "gradient_clipping": 0.5, "steps_per_print": 7,
    "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "betas": [0.8, 0.95], "eps": 1e-6,
                                              "weight_decay": 0.01, "torch_adam": true}},
    "scheduler": {"type": "WarmupCosineLR", "params": {"warmup_num_steps": 50,
                                                       "total_num_steps": 1000}},
    "fp16": {"enabled": true, "loss_scale": 0, "initial_scale_power": 12, "loss_scale_window": 500,
             "hysteresis": 3, "consecutive_hysteresis": true, "min_loss_scale": 0.5},
    "bf16": {"enabled": false},
    "zero_optimization": {"stage": 0, "reduce_bucket_size": 5e7, "overlap_comm": false,
                          "contiguous_gradients": false},
    "model": {"n_layer": 3, "n_head": 2, "n_embd": 32, "seq_len": 48, "vocab_size": 100,
              "padded_vocab_size": 128, "recompute_activations": true},
    "data": {"synthetic": {"task": "addition", "digits": 3, "num_samples": 5000, "seed": 9},
             "shuffle": false, "prefetch": 0},
    "parallel": {"dp": 2, "pp": 1, "tp": 1},
    "training": {"steps": 500, "seed": 77, "metrics_file": "m.jsonl", "output_dir": "out",
                 "eval_interval": 25, "eval_samples": 50, "threads": 3}
  })");
  EXPECT_EQ(c.train_batch_size, 64);
  EXPECT_EQ(c.micro_batch_size, 16);
  EXPECT_EQ(c.gradient_accumulation_steps, 2);
  EXPECT_EQ(c.gradient_clipping, 0.5);
  EXPECT_EQ(c.optimizer.type, OptimizerType::kAdamW);
  EXPECT_EQ(c.optimizer.adamw.lr, 1e-3f);
  EXPECT_EQ(c.optimizer.adamw.beta1, 0.8f);
  EXPECT_EQ(c.optimizer.adamw.beta2, 0.95f);
  EXPECT_EQ(c.optimizer.adamw.eps, 1e-6f);
  EXPECT_EQ(c.optimizer.adamw.weight_decay, 0.01f);
  EXPECT_EQ(c.optimizer.lr(), 1e-3f);
  ASSERT_TRUE(std::holds_alternative<nn::WarmupCosineLrConfig>(c.scheduler));
  const auto& cosine = std::get<nn::WarmupCosineLrConfig>(c.scheduler);
  EXPECT_EQ(cosine.base_lr, 1e-3f);
  EXPECT_EQ(cosine.total_num_steps, 1000);
  EXPECT_EQ(cosine.warmup_num_steps, 50);
  EXPECT_EQ(cosine.cos_min_ratio, 1e-4f);  // DeepSpeed's default
  EXPECT_EQ(cosine.warmup_type, nn::WarmupType::kLog);
  EXPECT_TRUE(c.fp16.enabled);
  EXPECT_EQ(c.fp16.static_loss_scale, 0);
  EXPECT_EQ(c.fp16.dynamic.initial_scale_power, 12);
  EXPECT_EQ(c.fp16.dynamic.scale_window, 500);
  EXPECT_EQ(c.fp16.dynamic.hysteresis, 3);
  EXPECT_TRUE(c.fp16.dynamic.consecutive_hysteresis);
  EXPECT_EQ(c.fp16.dynamic.min_scale, 0.5);
  EXPECT_FALSE(c.bf16);
  EXPECT_EQ(c.zero.stage, 0);
  EXPECT_EQ(c.zero.reduce_bucket_size, 50000000);
  EXPECT_FALSE(c.zero.overlap_comm);
  EXPECT_FALSE(c.zero.contiguous_gradients);
  EXPECT_EQ(c.model.num_layers(), 3);
  EXPECT_EQ(c.model.num_heads(), 2);
  EXPECT_EQ(c.model.hidden_size(), 32);
  EXPECT_EQ(c.model.max_seq_len(), 48);
  EXPECT_EQ(c.model.vocab_size(), 100);
  EXPECT_EQ(c.model.padded_vocab(), 128);
  EXPECT_TRUE(c.model_options.recompute_activations);
  EXPECT_TRUE(c.data.path.empty());
  ASSERT_TRUE(c.data.synthetic.has_value());
  EXPECT_EQ(c.data.synthetic->task, "addition");
  EXPECT_EQ(c.data.synthetic->digits, 3);
  EXPECT_EQ(c.data.synthetic->num_samples, 5000);
  EXPECT_EQ(c.data.synthetic->seed, 9u);
  EXPECT_FALSE(c.data.shuffle);
  EXPECT_EQ(c.data.prefetch, 0);
  EXPECT_EQ(c.parallel.dp, 2);
  EXPECT_EQ(c.training.steps, 500);
  EXPECT_EQ(c.training.seed, 77u);
  EXPECT_EQ(c.training.log_interval, 7);  // steps_per_print
  EXPECT_EQ(c.training.metrics_file, "m.jsonl");
  EXPECT_EQ(c.training.output_dir, "out");
  EXPECT_EQ(c.training.eval_interval, 25);
  EXPECT_EQ(c.training.eval_samples, 50);
  EXPECT_EQ(c.training.threads, 3);
  EXPECT_TRUE(c.warnings.empty()) << warnings_of(c);
}

TEST(TrainConfigTest, DeviceIsAutoCpuOrCuda) {
  EXPECT_EQ(parse_ok(kBase).device, DeviceChoice::kAuto);
  EXPECT_EQ(parse_ok(patched(R"({"device": "cpu"})")).device, DeviceChoice::kCpu);
  EXPECT_EQ(parse_ok(patched(R"({"device": "cuda"})")).device, DeviceChoice::kCuda);
  EXPECT_EQ(parse_ok(patched(R"({"device": "auto"})")).device, DeviceChoice::kAuto);
  expect_error(R"({"device": "gpu"})", "device", "did you mean \"cuda\"?");
  expect_error(R"({"device": "cuda:1"})", "device", "name no index");
  expect_error(R"({"device": 1})", "device", "");
  // Written back as it was resolved.
  TrainConfig c = parse_ok(kBase);
  c.device = DeviceChoice::kCuda;
  EXPECT_EQ(parse_ok(to_json(c)).device, DeviceChoice::kCuda);
}

TEST(TrainConfigTest, AbsentKeysTakeDefaults) {
  const TrainConfig c = parse_ok(R"({"train_batch_size": 8, "data": {"synthetic": {}}})");
  const TrainConfig d;
  EXPECT_EQ(c.train_batch_size, 8);
  EXPECT_EQ(c.micro_batch_size, 8);
  EXPECT_EQ(c.gradient_accumulation_steps, 1);
  EXPECT_EQ(c.optimizer.type, OptimizerType::kAdamW);
  EXPECT_EQ(c.optimizer.adamw.lr, nn::AdamWConfig().lr);
  EXPECT_TRUE(std::holds_alternative<std::monostate>(c.scheduler));
  EXPECT_EQ(c.lr_schedule.lr_at(1), c.optimizer.lr());
  EXPECT_EQ(c.lr_schedule.lr_at(1000), c.optimizer.lr());
  EXPECT_EQ(c.model.num_layers(), d.model.num_layers());
  EXPECT_EQ(c.model.max_seq_len(), d.model.max_seq_len());
  EXPECT_EQ(c.data.synthetic->digits, 2);
  EXPECT_EQ(c.training.seed, d.training.seed);
  EXPECT_EQ(c.training.log_interval, 1);
  EXPECT_EQ(c.zero.reduce_bucket_size, 500000000);
  EXPECT_TRUE(c.warnings.empty()) << warnings_of(c);
}

TEST(TrainConfigTest, NullMeansNotSet) {
  const TrainConfig c = parse_ok(R"({"train_batch_size": 8, "gradient_accumulation_steps": null,
      "fp16": null, "steps_per_print": null, "wandb": null, "scheduler": null,
      "data": {"synthetic": {"digits": null}, "path": null}})");
  EXPECT_FALSE(c.fp16.enabled);
  EXPECT_EQ(c.gradient_accumulation_steps, 1);
  EXPECT_EQ(c.training.log_interval, 1);
  EXPECT_EQ(c.data.synthetic->digits, 2);
  EXPECT_TRUE(c.warnings.empty()) << warnings_of(c);
}

TEST(TrainConfigTest, ExactFloatsAndIntegralNumbers) {
  const TrainConfig c = parse_ok(patched(R"({"zero_optimization": {"reduce_bucket_size": 2e8},
                           "model": {"n_layer": 4.0}})"));
  EXPECT_EQ(c.zero.reduce_bucket_size, 200000000);
  EXPECT_EQ(c.model.num_layers(), 4);
}

// ---- malformed JSON ----------------------------------------------------------

TEST(TrainConfigTest, MalformedJsonNamesLineAndColumn) {
  const std::string message =
      error_of("{\n  \"train_batch_size\": 32,\n  \"model\": {\"n_layer\": 2,}\n}");
  EXPECT_TRUE(absl::StartsWith(message, "line 3, column 26: invalid JSON")) << message;
  EXPECT_TRUE(absl::StartsWith(error_of(""), "line 1, column ")) << error_of("");
  EXPECT_TRUE(absl::StrContains(error_of("{\"a\": 1} x"), "line 1, column 10"))
      << error_of("{\"a\": 1} x");
}

TEST(TrainConfigTest, TopLevelMustBeAnObject) {
  EXPECT_EQ(error_of("[1, 2]"), "config: expected a JSON object at the top level, found array");
}

TEST(TrainConfigTest, DuplicateKeyIsAnError) {
  const std::string message = error_of(R"({"train_batch_size": 8, "data": {"synthetic": {}},
      "optimizer": {"type": "AdamW", "params": {"lr": 0.1, "eps": 1e-8, "lr": 0.2}}})");
  EXPECT_EQ(message, "optimizer.params.lr: duplicate key (keep one)");
}

// ---- unknown keys ------------------------------------------------------------

TEST(TrainConfigTest, UnknownKeysNameTheirPathAndSuggest) {
  expect_error(R"({"train_batch_szie": 8})", "train_batch_szie",
               "unknown key (did you mean 'train_batch_size'?)");
  expect_error(R"({"model": {"n_layers": 4}})", "model.n_layers",
               "unknown key (did you mean 'n_layer'?)");
  expect_error(R"({"optimizer": {"params": {"weight_decya": 0.1}}})",
               "optimizer.params.weight_decya", "did you mean 'weight_decay'?");
  expect_error(R"({"data": {"synthetic": {"digit": 3}}})", "data.synthetic.digit",
               "did you mean 'digits'?");
  // Troupe's keys written at the top level point to their section.
  expect_error(R"({"seed": 3})", "seed", "did you mean 'training.seed'?");
  expect_error(R"({"lr": 3})", "lr", "did you mean 'optimizer.params.lr'?");
  // Nothing close: no suggestion.
  const std::string message = error_of(patched(R"({"frobnicate": 1})"));
  EXPECT_EQ(message, "frobnicate: unknown key");
}

TEST(TrainConfigTest, ParamsOfAnotherOptimizerAreUnknown) {
  expect_error(R"({"optimizer": {"type": "SGD", "params": {"betas": [0.9, 0.9]}}})",
               "optimizer.params.betas", "unknown key for optimizer type SGD");
  expect_error(R"({"scheduler": {"type": "WarmupCosineLR", "params": {"warmup_max_lr": 0.1}}})",
               "scheduler.params.warmup_max_lr", "unknown key for scheduler type WarmupCosineLR");
}

// ---- types and ranges --------------------------------------------------------

TEST(TrainConfigTest, WrongTypeNamesKeyAndTypeFound) {
  expect_error(R"({"model": {"n_layer": "4"}})", "model.n_layer",
               "expected an integer, found string \"4\"");
  expect_error(R"({"optimizer": {"params": {"lr": "3e-3"}}})", "optimizer.params.lr",
               "expected a number, found string \"3e-3\"");
  expect_error(R"({"model": {"n_layer": 2.5}})", "model.n_layer",
               "expected an integer, found number 2.5");
  expect_error(R"({"data": {"shuffle": 1}})", "data.shuffle",
               "expected true or false, found number 1");
  expect_error(R"({"training": {"output_dir": 5}})", "training.output_dir",
               "expected a string, found number 5");
  expect_error(R"({"model": []})", "model", "expected an object, found array");
  expect_error(R"({"train_batch_size": "auto"})", "train_batch_size",
               "'auto' is a Hugging Face Trainer placeholder");
  expect_error(R"({"optimizer": {"params": {"betas": 0.9}}})", "optimizer.params.betas",
               "expected [beta1, beta2], found number 0.9");
  expect_error(R"({"optimizer": {"params": {"betas": [0.9, 0.99, 0.999]}}})",
               "optimizer.params.betas", "found an array of 3 elements");
}

TEST(TrainConfigTest, OutOfRangeNamesKeyAndBound) {
  expect_error(R"({"model": {"n_layer": 0}})", "model.n_layer",
               "0 is out of range; must be in [1, 1024]");
  expect_error(R"({"model": {"seq_len": 1}})", "model.seq_len", "must be in [2, 1048576]");
  expect_error(R"({"model": {"n_head": 3000000000}})", "model.n_head", "must be in [1, 1024]");
  // Every count has a bound: sizes that would overflow or exhaust a machine
  // are refused here, not tried.
  expect_error(R"({"model": {"vocab_size": 2147483600}})", "model.vocab_size",
               "must be in [1, 16777216]");
  expect_error(R"({"model": {"padded_vocab_size": 2147483600}})", "model.padded_vocab_size",
               "must be in [0, 16777216]");
  expect_error(R"({"model": {"n_embd": 1000000}})", "model.n_embd", "must be in [1, 65536]");
  expect_error(R"({"training": {"threads": 100000}})", "training.threads", "must be in [0, 512]");
  expect_error(R"({"parallel": {"dp": 100000}})", "parallel.dp", "must be in [1, 4096]");
  expect_error(R"({"data": {"prefetch": 100000}})", "data.prefetch", "must be in [0, 1024]");
  expect_error(R"({"training": {"eval_samples": 100000000}})", "training.eval_samples",
               "must be in [0, 1048576]");
  expect_error(R"({"data": {"synthetic": {"digits": 10}}})", "data.synthetic.digits",
               "must be in [1, 9]");
  expect_error(R"({"data": {"synthetic": {"num_samples": 0}}})", "data.synthetic.num_samples",
               "must be in [1, 1099511627776]");
  expect_error(R"({"data": {"prefetch": -1}})", "data.prefetch", "must be in [0, 1024]");
  expect_error(R"({"optimizer": {"params": {"betas": [0.9, 1.0]}}})", "optimizer.params.betas[1]",
               "must be in [0, 1)");
  expect_error(R"({"optimizer": {"params": {"lr": -1}}})", "optimizer.params.lr", "must be >= 0");
  expect_error(R"({"gradient_clipping": -1})", "gradient_clipping", "must be >= 0");
  expect_error(R"({"training": {"steps": -1}})", "training.steps", "must be >= 0");
  expect_error(R"({"training": {"log_interval": 0}})", "training.log_interval", "must be >= 1");
  expect_error(R"({"training": {"seed": -1}})", "training.seed", "must be in [0, 2^64)");
  expect_error(R"({"parallel": {"dp": 0}})", "parallel.dp", "must be in [1, 4096]");
  expect_error(R"({"fp16": {"loss_scale_window": 0}})", "fp16.loss_scale_window", "must be >= 1");
  expect_error(R"({"fp16": {"hysteresis": 0}})", "fp16.hysteresis", "must be >= 1");
  expect_error(R"({"fp16": {"initial_scale_power": 200}})", "fp16.initial_scale_power",
               "must be in [-126, 126]");
  expect_error(R"({"fp16": {"min_loss_scale": 0}})", "fp16.min_loss_scale", "must be > 0");
  expect_error(R"({"zero_optimization": {"reduce_bucket_size": 0}})",
               "zero_optimization.reduce_bucket_size", "must be >= 1");
  expect_error(R"({"scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 0}}})",
               "scheduler.params.warmup_num_steps", "must be >= 1");
  expect_error(R"({"scheduler": {"type": "WarmupLR", "params": {"warmup_type": "cosine"}}})",
               "scheduler.params.warmup_type", "use \"log\" or \"linear\"");
}

TEST(TrainConfigTest, ModelIsValidated) {
  // What relates two keys is the architecture's validate()'s message, under "model".
  expect_error(R"({"model": {"n_embd": 64, "n_head": 3}})", "model",
               "GPTConfig: channels = 64 is not a multiple of num_heads = 3");
  expect_error(R"({"model": {"padded_vocab_size": 200}})", "model",
               "GPTConfig: padded_vocab_size = 200 < vocab_size = 256");
  // What only GPTConfig::validate knows: a tensor over INT_MAX elements.
  expect_error(R"({"model": {"n_embd": 65536, "n_head": 1, "vocab_size": 65536}})", "model",
               "INT_MAX");
}

TEST(TrainConfigTest, DataNeedsExactlyOneSource) {
  expect_error(R"({"data": {"path": "data/x"}})", "data", "not both");
  expect_error(R"({"data": {"synthetic": null, "shuffle": true}})", "data", "give data.path");
  expect_error(R"({"data": null})", "data", "missing");
  expect_error(R"({"data": {"synthetic": {"task": "multiplication"}}})", "data.synthetic.task",
               "the tasks are: addition");
  // "\n123456789+123456789=" and 10 answer digits do not fit in 16 tokens.
  expect_error(R"({"model": {"seq_len": 16}, "data": {"synthetic": {"digits": 9}}})",
               "model.seq_len", "too short for data.synthetic.digits 9");
  const TrainConfig c = parse_ok(patched(R"({"data": {"synthetic": null, "path": "data/x"}})"));
  EXPECT_EQ(c.data.path, "data/x");
  EXPECT_FALSE(c.data.synthetic.has_value());
}

// ---- not implemented yet -----------------------------------------------------

// DeepSpeed's zero_optimization keys, under their stage3_ names and their
// short aliases; what no stage has is refused, naming it.
TEST(TrainConfigTest, ZeroStagesAndTheirKeysAreRead) {
  TrainConfig c = parse_ok(patched(R"({"zero_optimization": {"stage": 3,
      "reduce_bucket_size": 2e7, "overlap_comm": false, "contiguous_gradients": true,
      "stage3_prefetch_bucket_size": 5e6, "stage3_param_persistence_threshold": 1e4,
      "stage3_max_live_parameters": 3e8, "stage3_gather_16bit_weights_on_model_save": true}})"));
  EXPECT_EQ(c.zero.stage, 3);
  EXPECT_EQ(c.zero.reduce_bucket_size, 20000000);
  EXPECT_FALSE(c.zero.overlap_comm);
  EXPECT_EQ(c.zero.stage3_prefetch_bucket_size, 5000000);
  EXPECT_EQ(c.zero.stage3_param_persistence_threshold, 10000);
  EXPECT_EQ(c.zero.stage3_max_live_parameters, 300000000);
  EXPECT_TRUE(c.zero.stage3_gather_16bit_weights_on_model_save);
  EXPECT_TRUE(c.warnings.empty()) << warnings_of(c);
  c = parse_ok(patched(R"({"zero_optimization": {"stage": 3, "prefetch_bucket_size": 7,
      "param_persistence_threshold": 8, "max_live_parameters": 900000,
      "gather_16bit_weights_on_model_save": true}})"));
  EXPECT_EQ(c.zero.stage3_prefetch_bucket_size, 7);
  EXPECT_EQ(c.zero.stage3_param_persistence_threshold, 8);
  EXPECT_EQ(c.zero.stage3_max_live_parameters, 900000);
  EXPECT_TRUE(c.zero.stage3_gather_16bit_weights_on_model_save);
  for (int stage : {1, 2}) {
    c = parse_ok(patched(absl::StrCat(R"({"zero_optimization": {"stage": )", stage, "}}")));
    EXPECT_EQ(c.zero.stage, stage);
  }
  expect_error(R"({"zero_optimization": {"stage": 4}})", "zero_optimization.stage",
               "must be in [0, 3]");
  expect_error(R"({"zero_optimization": {"stage": 3, "stage3_prefetch_bucketsize": 1}})",
               "zero_optimization.stage3_prefetch_bucketsize", "unknown key");
  // One block of the default model is 12 * 64^2 + 13 * 64 = 49,984 parameters.
  expect_error(R"({"zero_optimization": {"stage": 3, "stage3_max_live_parameters": 1000}})",
               "zero_optimization.stage3_max_live_parameters",
               "is below the 49984 parameters of the model's largest segment");
  expect_error(R"({"zero_optimization": {"stage3_max_live_parameters": -1}})",
               "zero_optimization.stage3_max_live_parameters", "must be in [0, ");
}

TEST(TrainConfigTest, PipelineScheduleKeys) {
  const TrainConfig defaults = parse_ok(kBase);
  EXPECT_EQ(actors::pipeline::schedule_name(defaults.parallel.schedule), std::string("1f1b"));
  EXPECT_EQ(defaults.parallel.virtual_stages, 1);
  EXPECT_TRUE(defaults.parallel.partition.empty());
  const TrainConfig c = parse_ok(patched(R"({"model": {"n_layer": 4},
      "gradient_accumulation_steps": 2, "train_batch_size": 64, "parallel": {"pp": 2,
      "schedule": "interleaved", "virtual_stages": 2, "partition": [1, 1, 1, 1]}})"));
  EXPECT_EQ(actors::pipeline::schedule_name(c.parallel.schedule), std::string("interleaved"));
  EXPECT_EQ(c.parallel.virtual_stages, 2);
  EXPECT_EQ(c.parallel.partition, (std::vector<int64_t>{1, 1, 1, 1}));
  EXPECT_EQ(defaults.parallel.partition_method, "parameters");
  EXPECT_EQ(parse_ok(patched(R"({"parallel": {"partition_method": "uniform"}})"))
                .parallel.partition_method,
            "uniform");
  expect_error(R"({"parallel": {"partition_method": "type:transformer"}})",
               "parallel.partition_method", "\"type:transformer\" is not a method");
  expect_error(R"({"parallel": {"schedule": "zb-v"}})", "parallel.schedule",
               "\"zb-v\" is not a schedule; one of \"gpipe\", \"1f1b\", \"interleaved\"");
  expect_error(R"({"parallel": {"schedule": "interleaved", "virtual_stages": 2},
      "model": {"n_layer": 4}})",
               "parallel.schedule", "\"interleaved\" with parallel.pp 1");
  expect_error(R"({"parallel": {"schedule": "interleaved"}})", "parallel.virtual_stages",
               "\"interleaved\" takes 2 or more model chunks a stage, the others 1");
  expect_error(R"({"parallel": {"virtual_stages": 2}})", "parallel.virtual_stages",
               "with parallel.schedule \"1f1b\"");
  expect_error(R"({"parallel": {"partition": [1, 1]}})", "parallel.partition",
               "2 stages' blocks for parallel.pp 1");
  // Interleaved: a count a model chunk; micro-batches a multiple of the stages.
  const TrainConfig interleaved = parse_ok(patched(R"({"model": {"n_layer": 4},
      "gradient_accumulation_steps": 2, "train_batch_size": 64, "parallel": {"pp": 2,
      "schedule": "interleaved", "virtual_stages": 2, "partition": [1, 1, 1, 1]}})"));
  EXPECT_EQ(interleaved.parallel.partition.size(), 4u);
  expect_error(R"({"model": {"n_layer": 4}, "gradient_accumulation_steps": 2,
      "train_batch_size": 64, "parallel": {"pp": 2, "schedule": "interleaved",
      "virtual_stages": 2, "partition": [2, 2]}})",
               "parallel.partition", "2 stages' blocks for parallel.pp 2 x 2 virtual_stages");
  expect_error(R"({"parallel": {"pp": 2, "schedule": "interleaved", "virtual_stages": 2}})",
               "parallel.virtual_stages",
               "2 stages of 2 model chunks for 2 layers (model.n_layer); each chunk holds a block");
  expect_error(R"({"model": {"n_layer": 4}, "gradient_accumulation_steps": 3,
      "train_batch_size": 96, "parallel": {"pp": 2, "schedule": "interleaved",
      "virtual_stages": 2}})",
               "parallel.schedule",
               "gradient_accumulation_steps (3, the micro-batches a step) "
               "must be a multiple of parallel.pp (2)");
  expect_error(R"({"parallel": {"partition": [3]}})", "parallel.partition",
               "its stages hold 3 blocks in all; the model has 2 (model.n_layer)");
  expect_error(R"({"parallel": {"partition": [0]}})", "parallel.partition",
               "expected positive integers, found number 0");
}

// Pipeline parallelism, as troupe's parallel.pp or Megatron's top-level
// pipeline_model_parallel_size (and tensor_model_parallel_size for tp).
TEST(TrainConfigTest, PipelineStagesAndMegatronSizes) {
  const TrainConfig c = parse_ok(patched(R"({"parallel": {"pp": 2, "schedule": "gpipe"}})"));
  EXPECT_EQ(c.parallel.pp, 2);
  EXPECT_EQ(actors::pipeline::schedule_name(c.parallel.schedule), std::string("gpipe"));
  const TrainConfig m = parse_ok(patched(R"({"pipeline_model_parallel_size": 2})"));
  EXPECT_EQ(m.parallel.pp, 2);
  const TrainConfig both =
      parse_ok(patched(R"({"parallel": {"pp": 2}, "pipeline_model_parallel_size": 2})"));
  EXPECT_EQ(both.parallel.pp, 2);
  expect_error(R"({"parallel": {"pp": 2}, "pipeline_model_parallel_size": 1})",
               "pipeline_model_parallel_size", "1 != parallel.pp 2 (the same setting; keep one)");
  expect_error(R"({"parallel": {"pp": 1}, "pipeline_model_parallel_size": 2})",
               "pipeline_model_parallel_size", "2 != parallel.pp 1 (the same setting; keep one)");
  // Megatron's virtual pipeline: its interleaved schedule, unless parallel.schedule says.
  const TrainConfig v = parse_ok(patched(R"({"pipeline_model_parallel_size": 2,
      "virtual_pipeline_model_parallel_size": 2, "model": {"n_layer": 4},
      "gradient_accumulation_steps": 2, "train_batch_size": 64})"));
  EXPECT_EQ(v.parallel.virtual_stages, 2);
  EXPECT_EQ(actors::pipeline::schedule_name(v.parallel.schedule), std::string("interleaved"));
  expect_error(R"({"parallel": {"pp": 2, "virtual_stages": 2, "schedule": "interleaved"},
      "virtual_pipeline_model_parallel_size": 3, "model": {"n_layer": 6}})",
               "virtual_pipeline_model_parallel_size",
               "3 != parallel.virtual_stages 2 (the same setting; keep one)");
  expect_error(R"({"parallel": {"pp": 2, "schedule": "1f1b"},
      "virtual_pipeline_model_parallel_size": 2, "model": {"n_layer": 4}})",
               "parallel.virtual_stages", "2 with parallel.schedule \"1f1b\"");
  const TrainConfig t = parse_ok(patched(R"({"tensor_model_parallel_size": 2})"));
  EXPECT_EQ(t.parallel.tp, 2);
  expect_error(R"({"tensor_model_parallel_size": 2, "parallel": {"tp": 4}})",
               "tensor_model_parallel_size", "2 != parallel.tp 4 (the same setting; keep one)");
  expect_error(R"({"parallel": {"pp": 3}})", "parallel.pp",
               "3 stages for 2 layers (model.n_layer)");
  expect_error(R"({"parallel": {"tp": 8}})", "parallel.tp",
               "num_heads = 4 does not split over tensor-parallel size 8");
}

TEST(TrainConfigTest, UnimplementedFeaturesAreErrors) {
  expect_error(R"({"parallel": {"tp": 2}, "zero_optimization": {"stage": 2}})", "parallel.tp",
               "2 with zero_optimization.stage above 1 is not implemented yet");
  expect_error(R"({"parallel": {"pp": 2}, "zero_optimization": {"stage": 3}})", "parallel.pp",
               "with zero_optimization.stage above 1 is not implemented yet");
  expect_error(R"({"parallel": {"pp": 2}, "elasticity": {"enabled": true}})", "parallel.pp",
               "with elasticity.enabled is not implemented yet");
  expect_error(R"({"optimizer": {"type": "Lamb"}})", "optimizer.type",
               "\"Lamb\" is not implemented; supported: AdamW, Adam");
  expect_error(R"({"optimizer": {"type": "AdamX"}})", "optimizer.type",
               "\"AdamX\" is not an optimizer (did you mean 'AdamW'?)");
  expect_error(R"({"optimizer": {"type": null}})", "optimizer.type", "missing");
  expect_error(R"({"optimizer": {"type": "Adam", "params": {"adam_w_mode": false}}})",
               "optimizer.params.adam_w_mode", "L2-coupled weight decay) is not implemented");
  expect_error(R"({"optimizer": {"params": {"amsgrad": true}}})", "optimizer.params.amsgrad",
               "not implemented");
  expect_error(R"({"scheduler": {"type": "OneCycle"}})", "scheduler.type",
               "\"OneCycle\" is not implemented; supported: WarmupLR, WarmupDecayLR");
  expect_error(R"({"scheduler": {"type": "LRRangeTest"}})", "scheduler.type", "not implemented");
  expect_error(R"({"scheduler": {"type": "WarmupCosine"}})", "scheduler.type",
               "not a scheduler (did you mean 'WarmupCosineLR'?)");
  expect_error(R"({"scheduler": {"type": "WarmupLR", "params": {"last_batch_iteration": 10}}})",
               "scheduler.params.last_batch_iteration", "use -1");
  expect_error(R"({"fp16": {"enabled": true}, "bf16": {"enabled": true}})", "bf16.enabled",
               "fp16 and bf16 are both enabled");
}

// ---- warnings ----------------------------------------------------------------

TEST(TrainConfigTest, UnimplementedDeepSpeedKeysWarn) {
  const TrainConfig c = parse_ok(patched(R"({
    "wall_clock_breakdown": true, "flops_profiler": {"enabled": true}, "activation_checkpointing":
    {"partition_activations":
    true}, "communication_data_type": "fp32", "prescale_gradients": true, "amp": {"enabled": true},
    "gradient_predivide_factor": 2.0,
    "zero_optimization": {"stage": 3, "zero_hpz_partition_size": 2, "zero_quantized_weights": true,
                          "offload_optimizer": {"device": "cpu"}, "allgather_bucket_size": 5e8},
    "fp16": {"enabled": false, "auto_cast": true},
    "checkpoint": {"tag_validation": "Fail"}, "fault_tolerance": {},
    "elasticity": {"enabled": true, "max_train_batch_size": 64}
  })"));
  for (const char* expected : {
           "wall_clock_breakdown is not implemented by troupe; ignored",
           "flops_profiler is not implemented by troupe; ignored",
           "activation_checkpointing is not implemented by troupe; ignored "
           "(model.recompute_activations is troupe's)",
           "communication_data_type is not implemented",
           "prescale_gradients is not implemented",
           "amp is not implemented",
           "gradient_predivide_factor is not implemented",
           "zero_optimization.zero_hpz_partition_size is not implemented by troupe; ignored",
           "zero_optimization.zero_quantized_weights is not implemented by troupe; ignored",
           "zero_optimization.offload_optimizer is not implemented",
           "zero_optimization.allgather_bucket_size is not implemented",
           "fp16.auto_cast is not implemented",
           "checkpoint.tag_validation is not implemented by troupe; ignored",
           "elasticity.max_train_batch_size is DeepSpeed's and means nothing to troupe; ignored "
           "(troupe keeps train_batch_size as the global batch)",
       }) {
    EXPECT_TRUE(has_warning(c, expected)) << expected << " not in:" << warnings_of(c);
  }
  EXPECT_EQ(c.warnings.size(), 14u) << warnings_of(c);
}

// DeepSpeed's tensorboard section is troupe's training.tensorboard_dir: output_path/job_name.
TEST(TrainConfigTest, DeepSpeedsTensorboardSectionSetsTheDirectory) {
  EXPECT_EQ(parse_ok(patched(R"({"tensorboard": {"enabled": true, "output_path": "tb",
                                                  "job_name": "gpt"}})"))
                .training.tensorboard_dir,
            "tb/gpt");
  EXPECT_EQ(parse_ok(patched(R"({"tensorboard": {"enabled": false, "output_path": "tb"}})"))
                .training.tensorboard_dir,
            "");
  EXPECT_EQ(
      parse_ok(patched(R"({"training": {"tensorboard_dir": "runs/x"}})")).training.tensorboard_dir,
      "runs/x");
  expect_error(R"({"tensorboard": {"enabled": true, "output_path": "a", "job_name": "b"},
                   "training": {"tensorboard_dir": "c"}})",
               "tensorboard", "give one of them");
  expect_error(R"({"tensorboard": {"enabled": true, "output": "a"}})", "tensorboard.output",
               "unknown key");
}

TEST(TrainConfigTest, FaultToleranceSection) {
  const TrainConfig c = parse_ok(patched(
      R"({"fault_tolerance": {"enabled": true, "spare_nodes": 1, "max_failures": 5,
          "wait_for_node_s": 30, "step_timeout_s": 20}})"));
  EXPECT_TRUE(c.fault_tolerance.enabled);
  EXPECT_EQ(c.fault_tolerance.spare_nodes, 1);
  EXPECT_EQ(c.fault_tolerance.max_failures, 5);
  EXPECT_EQ(c.fault_tolerance.wait_for_node_s, 30);
  EXPECT_EQ(c.fault_tolerance.step_timeout_s, 20);
  const TrainConfig defaults = parse_ok(patched("{}"));
  EXPECT_FALSE(defaults.fault_tolerance.enabled);
  EXPECT_EQ(defaults.fault_tolerance.max_failures, 3);
  expect_error(R"({"fault_tolerance": {"spare_node": 1}})", "fault_tolerance.spare_node",
               "did you mean 'spare_nodes'");
  expect_error(R"({"fault_tolerance": {"step_timeout_s": 0}})", "fault_tolerance.step_timeout_s",
               "");
  expect_error(R"({"fault_tolerance": {"spare_nodes": -1}})", "fault_tolerance.spare_nodes", "");
  // Round trip.
  const TrainConfig again = parse_ok(to_json(c));
  EXPECT_EQ(again.fault_tolerance.spare_nodes, 1);
  EXPECT_EQ(again.fault_tolerance.step_timeout_s, 20);
}

TEST(TrainConfigTest, ElasticitySection) {
  const TrainConfig c = parse_ok(patched(
      R"({"elasticity": {"enabled": true, "min_dp": 1, "max_dp": 4, "micro_batch_sizes": [16, 4, 8, 4]}})"));
  EXPECT_TRUE(c.elasticity.enabled);
  EXPECT_EQ(c.elasticity.min_dp, 1);
  EXPECT_EQ(c.elasticity.max_dp, 4);
  EXPECT_EQ(c.elasticity.micro_batch_sizes, (std::vector<int64_t>{4, 8, 16}));  // sorted, once each
  const TrainConfig defaults = parse_ok(kBase);
  EXPECT_FALSE(defaults.elasticity.enabled);
  EXPECT_EQ(defaults.elasticity.min_dp, 1);
  EXPECT_EQ(defaults.elasticity.max_dp, kMaxParallel);
  EXPECT_TRUE(defaults.elasticity.micro_batch_sizes.empty());
  // DeepSpeed's names for the same bounds, and its keys troupe has no use for.
  const TrainConfig ds = parse_ok(patched(R"({"elasticity": {"enabled": true, "min_gpus": 2,
      "max_gpus": 3, "min_time": 20, "version": 0.1, "prefer_larger_batch": true}})"));
  EXPECT_EQ(ds.elasticity.min_dp, 2);
  EXPECT_EQ(ds.elasticity.max_dp, 3);
  EXPECT_TRUE(has_warning(ds, "elasticity.min_time is DeepSpeed's and means nothing to troupe"));
  EXPECT_TRUE(has_warning(ds, "elasticity.version is DeepSpeed's"));
  EXPECT_TRUE(has_warning(ds, "elasticity.prefer_larger_batch is DeepSpeed's"));
  EXPECT_EQ(ds.warnings.size(), 3u) << warnings_of(ds);  // a DDP job resizes: no warning of it
  const TrainConfig ft = parse_ok(
      patched(R"({"elasticity": {"enabled": true}, "fault_tolerance": {"enabled": true}})"));
  EXPECT_TRUE(ft.warnings.empty()) << warnings_of(ft);  // it resizes, and replaces its losses
  // Errors name the key.
  expect_error(R"({"elasticity": {"min_dp": 2, "min_gpus": 2}})", "elasticity.min_dp",
               "given together with elasticity.min_gpus");
  expect_error(R"({"elasticity": {"min_dp": 3, "max_dp": 2}})", "elasticity.min_dp",
               "is above elasticity.max_dp 2");
  expect_error(R"({"elasticity": {"enabled": true, "min_dp": 3}})", "parallel.dp",
               "outside elasticity's [min_dp 3");
  expect_error(R"({"elasticity": {"enabled": true, "micro_batch_sizes": [4, 8]}})",
               "train_micro_batch_size_per_gpu",
               "is not one of elasticity.micro_batch_sizes [4, 8]");
  EXPECT_TRUE(parse_ok(patched(R"({"elasticity": {"micro_batch_sizes": []}})"))
                  .elasticity.micro_batch_sizes.empty());  // as absent
  expect_error(R"({"elasticity": {"micro_batch_sizes": 4}})", "elasticity.micro_batch_sizes",
               "expected an array of positive integers, found number 4");
  expect_error(R"({"elasticity": {"micro_batch_sizes": [2, 0]}})", "elasticity.micro_batch_sizes",
               "expected positive integers, found number 0");
  expect_error(R"({"elasticity": {"micro_batch_sizes": [2.5]}})", "elasticity.micro_batch_sizes",
               "expected positive integers");
  expect_error(R"({"elasticity": {"max_dpp": 2}})", "elasticity.max_dpp", "did you mean 'max_dp'");
  // Written back and read again.
  const TrainConfig again = parse_ok(to_json(c));
  EXPECT_TRUE(again.elasticity.enabled);
  EXPECT_EQ(again.elasticity.max_dp, 4);
  EXPECT_EQ(again.elasticity.micro_batch_sizes, c.elasticity.micro_batch_sizes);
}

TEST(TrainConfigTest, CheckpointSection) {
  const TrainConfig c = parse_ok(patched(
      R"({"checkpoint": {"dir": "ckpt", "interval_steps": 50, "keep": 3, "async": false}})"));
  EXPECT_EQ(c.checkpoint.dir, "ckpt");
  EXPECT_EQ(c.checkpoint.interval_steps, 50);
  EXPECT_EQ(c.checkpoint.keep, 3);
  EXPECT_FALSE(c.checkpoint.async);
  EXPECT_TRUE(c.warnings.empty()) << warnings_of(c);
  const TrainConfig defaults = parse_ok(kBase);
  EXPECT_EQ(defaults.checkpoint.interval_steps, 0);
  EXPECT_EQ(defaults.checkpoint.keep, 2);
  EXPECT_TRUE(defaults.checkpoint.async);
  EXPECT_EQ(error_of(patched(R"({"checkpoint": {"interval_steps": 10}})")),
            "checkpoint.dir: missing; checkpoint.interval_steps 10 saves a checkpoint to it");
  EXPECT_EQ(
      error_of(patched(R"({"checkpoint": {"dir": "c", "keep": 0}})")).rfind("checkpoint.keep", 0),
      0u);
  EXPECT_EQ(error_of(patched(R"({"checkpoint": {"dir": "c", "interval": 10}})"))
                .rfind("checkpoint.interval: unknown key", 0),
            0u);
  // DeepSpeed's keys of the section are recognised, and asking for their
  // defaults does not warn.
  EXPECT_TRUE(
      parse_ok(patched(R"({"checkpoint": {"tag_validation": "Warn", "load_universal": false}})"))
          .warnings.empty());
  // Written back and read again.
  EXPECT_EQ(parse_ok(to_json(c)).checkpoint.dir, "ckpt");
}

TEST(TrainConfigTest, SettingsThatAskForNothingDoNotWarn) {
  const TrainConfig c = parse_ok(patched(R"({
    "wall_clock_breakdown": false, "tensorboard": {"enabled": false, "output_path": "tb"},
    "gradient_predivide_factor": 1.0, "zero_allow_untested_optimizer": false,
    "zero_optimization": {"offload_optimizer": {"device": "none"}, "offload_param": null},
    "bf16": {"enabled": false}
  })"));
  EXPECT_TRUE(c.warnings.empty()) << warnings_of(c);
}

TEST(TrainConfigTest, WarmupLrWithoutMaxLrWarnsAboutDeepSpeedsDefault) {
  const TrainConfig c = parse_ok(patched(R"({"scheduler": {"type": "WarmupLR"}})"));
  EXPECT_TRUE(has_warning(c,
                          "scheduler.params.warmup_max_lr is not set: WarmupLR uses "
                          "DeepSpeed's default 0.001, not optimizer.params.lr 0.003"))
      << warnings_of(c);
  EXPECT_EQ(c.lr_schedule.lr_at(5000), 1e-3f);  // DeepSpeed's behaviour, warned about
}

// ---- the batch rule ----------------------------------------------------------

struct BatchCase {
  const char* keys;  // JSON members: the batch keys given
  int dp;
  int64_t batch, micro, accumulation;  // expected; 0: an error
  const char* error;                   // expected message, when an error
};

class BatchRuleTest : public testing::TestWithParam<BatchCase> {};

TEST_P(BatchRuleTest, DerivesOrRejects) {
  const BatchCase& b = GetParam();
  std::string text = absl::StrCat(R"({"data": {"synthetic": {}}, "parallel": {"dp": )", b.dp, "}",
                                  *b.keys ? ", " : "", b.keys, "}");
  if (b.batch == 0) {
    EXPECT_EQ(error_of(text), b.error);
    return;
  }
  const TrainConfig c = parse_ok(text);
  EXPECT_EQ(c.train_batch_size, b.batch) << text;
  EXPECT_EQ(c.micro_batch_size, b.micro) << text;
  EXPECT_EQ(c.gradient_accumulation_steps, b.accumulation) << text;
}

INSTANTIATE_TEST_SUITE_P(
    TrainConfigTest, BatchRuleTest,
    testing::Values(
        // All three, agreeing.
        BatchCase{R"("train_batch_size": 64, "train_micro_batch_size_per_gpu": 16,
                     "gradient_accumulation_steps": 2)",
                  2, 64, 16, 2, ""},
        // All three, disagreeing.
        BatchCase{R"("train_batch_size": 64, "train_micro_batch_size_per_gpu": 16,
                     "gradient_accumulation_steps": 2)",
                  3, 0, 0, 0,
                  "train_batch_size 64 != train_micro_batch_size_per_gpu 16 x "
                  "gradient_accumulation_steps 2 x dp 3 = 96"},
        // Two given: the third derived.
        BatchCase{R"("train_batch_size": 96, "train_micro_batch_size_per_gpu": 16)", 3, 96, 16, 2,
                  ""},
        BatchCase{R"("train_batch_size": 96, "gradient_accumulation_steps": 4)", 3, 96, 8, 4, ""},
        BatchCase{R"("train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 3)", 2, 24,
                  4, 3, ""},
        // Two given, not dividing.
        BatchCase{R"("train_batch_size": 100, "train_micro_batch_size_per_gpu": 16)", 2, 0, 0, 0,
                  "train_batch_size 100 is not a multiple of train_micro_batch_size_per_gpu 16 x "
                  "dp 2 = 32, so gradient_accumulation_steps would not be a whole number"},
        BatchCase{R"("train_batch_size": 30, "gradient_accumulation_steps": 4)", 2, 0, 0, 0,
                  "train_batch_size 30 is not a multiple of gradient_accumulation_steps 4 x dp 2 = "
                  "8, so train_micro_batch_size_per_gpu would not be a whole number"},
        // One given.
        BatchCase{R"("train_batch_size": 32)", 4, 32, 8, 1, ""},
        BatchCase{R"("train_batch_size": 30)", 4, 0, 0, 0,
                  "train_batch_size 30 is not a multiple of dp = 4, so "
                  "train_micro_batch_size_per_gpu would not be a whole number"},
        BatchCase{R"("train_micro_batch_size_per_gpu": 5)", 3, 15, 5, 1, ""},
        BatchCase{R"("gradient_accumulation_steps": 5)", 3, 0, 0, 0,
                  "train_batch_size: missing; gradient_accumulation_steps alone does not set the "
                  "batch: give train_batch_size or train_micro_batch_size_per_gpu too"},
        // None.
        BatchCase{"", 1, 0, 0, 0,
                  "train_batch_size: missing; give train_batch_size or "
                  "train_micro_batch_size_per_gpu (or both, with gradient_accumulation_steps): "
                  "train_batch_size = train_micro_batch_size_per_gpu x "
                  "gradient_accumulation_steps x dp"}));

// A message "train_batch_size A != ... = B" with A == B: a batch rule that
// compared numbers it could not hold.
void expect_no_equal_shown_unequal(const std::string& message) {
  const size_t unequal = message.find(" != ");
  const size_t equals = message.rfind(" = ");
  if (unequal == std::string::npos || equals == std::string::npos) return;
  const size_t start = message.rfind(' ', unequal - 1) + 1;
  EXPECT_NE(message.substr(start, unequal - start), message.substr(equals + 3)) << message;
}

// The product micro x accumulation x dp out of train_batch_size's range
// (a probe found "train_batch_size 68719476704 != ... = 68719476704" for an
// accumulation of 2^31 - 1): refused naming the keys and the bound, whether
// train_batch_size is given or derived, and the product overflowing int64
// too; at the bound it is accepted.
TEST(ConfigReliabilityTest, ABatchProductOverTheBoundIsRefusedNamingTheKeysAndTheBound) {
  auto config = [](const std::string& keys, int dp) {
    return absl::StrCat(R"({"data": {"synthetic": {}}, "parallel": {"dp": )", dp, "}, ", keys, "}");
  };
  const std::string derived = error_of(config(
      R"("train_micro_batch_size_per_gpu": 16, "gradient_accumulation_steps": 2147483647)", 2));
  EXPECT_EQ(derived,
            "train_batch_size: train_micro_batch_size_per_gpu 16 x gradient_accumulation_steps "
            "2147483647 x parallel.dp 2 = 68719476704 is over 2147483647 (2^31 - 1), the largest "
            "train_batch_size; make them smaller");
  expect_no_equal_shown_unequal(derived);
  const std::string given =
      error_of(config(R"("train_batch_size": 64, "train_micro_batch_size_per_gpu": 16,
                "gradient_accumulation_steps": 2147483647)",
                      2));
  EXPECT_EQ(given, derived);
  const std::string past_int64 = error_of(
      config(R"("train_batch_size": 2147483647, "train_micro_batch_size_per_gpu": 2147483647,
                "gradient_accumulation_steps": 2147483647)",
             4096));
  EXPECT_EQ(past_int64,
            "train_batch_size: train_micro_batch_size_per_gpu 2147483647 x "
            "gradient_accumulation_steps 2147483647 x parallel.dp 4096 = more than 2^63 is over "
            "2147483647 (2^31 - 1), the largest train_batch_size; make them smaller");
  expect_no_equal_shown_unequal(past_int64);
  // Just over, and at the bound.
  EXPECT_TRUE(absl::StrContains(
      error_of(config(R"("train_micro_batch_size_per_gpu": 1073741824)", 2)),
      "train_micro_batch_size_per_gpu 1073741824 x gradient_accumulation_steps 1 x parallel.dp 2 "
      "= 2147483648 is over 2147483647"));
  const TrainConfig at = parse_ok(config(R"("train_micro_batch_size_per_gpu": 2147483647)", 1));
  EXPECT_EQ(at.train_batch_size, 2147483647);
  // Unequal numbers are still shown unequal.
  const std::string unequal =
      error_of(config(R"("train_batch_size": 64, "train_micro_batch_size_per_gpu": 16,
                         "gradient_accumulation_steps": 2)",
                      3));
  EXPECT_EQ(unequal,
            "train_batch_size 64 != train_micro_batch_size_per_gpu 16 x "
            "gradient_accumulation_steps 2 x dp 3 = 96");
  expect_no_equal_shown_unequal(unequal);
}

// The keys that sized the mesh, as the config gave them, for the messages
// that name them (a mesh the cluster cannot hold): troupe's, or Megatron's
// top-level names.
TEST(ConfigReliabilityTest, TheMeshsKeysAreNamedAsTheConfigGaveThem) {
  const TrainConfig ours = parse_ok(patched(R"({"parallel": {"dp": 1, "pp": 2, "tp": 2},
      "train_batch_size": 16, "gradient_accumulation_steps": 1})"));
  EXPECT_EQ(ours.parallel.pp_key, "parallel.pp");
  EXPECT_EQ(ours.parallel.tp_key, "parallel.tp");
  const TrainConfig megatron = parse_ok(patched(R"({"parallel": {"dp": 1},
      "pipeline_model_parallel_size": 2, "tensor_model_parallel_size": 2,
      "train_batch_size": 16, "gradient_accumulation_steps": 1})"));
  EXPECT_EQ(megatron.parallel.pp, 2);
  EXPECT_EQ(megatron.parallel.pp_key, "pipeline_model_parallel_size");
  EXPECT_EQ(megatron.parallel.tp_key, "tensor_model_parallel_size");
  // Both names, agreeing: troupe's.
  const TrainConfig both = parse_ok(patched(R"({"parallel": {"dp": 1, "pp": 2},
      "pipeline_model_parallel_size": 2, "train_batch_size": 16,
      "gradient_accumulation_steps": 1})"));
  EXPECT_EQ(both.parallel.pp_key, "parallel.pp");
}

// ---- schedules ---------------------------------------------------------------

// Expects `c.lr_schedule` to give `expected`'s rate at every step up to `steps`.
void expect_same_schedule(const TrainConfig& c, const nn::LrSchedule& expected, int steps) {
  for (int step = 1; step <= steps; ++step) {
    ASSERT_EQ(c.lr_schedule.lr_at(step), expected.lr_at(step)) << "step " << step;
  }
}

TEST(TrainConfigTest, WarmupLrMapsDeepSpeedParams) {
  const TrainConfig c = parse_ok(patched(R"({"scheduler": {"type": "WarmupLR", "params": {
      "warmup_min_lr": 1e-4, "warmup_max_lr": 2e-3, "warmup_num_steps": 20,
      "warmup_type": "linear"}}})"));
  auto expected = nn::LrSchedule::warmup({.warmup_min_lr = 1e-4f,
                                          .warmup_max_lr = 2e-3f,
                                          .warmup_num_steps = 20,
                                          .warmup_type = nn::WarmupType::kLinear});
  ASSERT_TRUE(expected.ok());
  expect_same_schedule(c, *expected, 100);
  EXPECT_EQ(c.lr_schedule.lr_at(1), 1e-4f);   // DeepSpeed's pre-start rate
  EXPECT_EQ(c.lr_schedule.lr_at(50), 2e-3f);  // held after the warmup
  EXPECT_TRUE(c.warnings.empty()) << warnings_of(c);
}

TEST(TrainConfigTest, WarmupDecayLrMapsDeepSpeedParams) {
  const TrainConfig c = parse_ok(patched(R"({"scheduler": {"type": "WarmupDecayLR", "params": {
      "total_num_steps": 80, "warmup_min_lr": 0, "warmup_max_lr": 1e-3, "warmup_num_steps": 10}}})"));
  auto expected = nn::LrSchedule::warmup_decay({.total_num_steps = 80,
                                                .warmup_min_lr = 0,
                                                .warmup_max_lr = 1e-3f,
                                                .warmup_num_steps = 10,
                                                .warmup_type = nn::WarmupType::kLog});
  ASSERT_TRUE(expected.ok());
  expect_same_schedule(c, *expected, 100);
  EXPECT_EQ(c.lr_schedule.lr_at(12), 1e-3f);  // i = 10: the peak
  EXPECT_EQ(c.lr_schedule.lr_at(82), 0.0f);   // i = 80: decayed to warmup_min_lr
}

TEST(TrainConfigTest, WarmupCosineLrScalesTheOptimizersLr) {
  const TrainConfig c = parse_ok(patched(R"({"scheduler": {"type": "WarmupCosineLR", "params": {
      "total_num_steps": 60, "warmup_num_steps": 10, "warmup_min_ratio": 0.1,
      "cos_min_ratio": 0.2, "warmup_type": "linear"}}})"));
  auto expected = nn::LrSchedule::warmup_cosine({.base_lr = 0.003f,
                                                 .total_num_steps = 60,
                                                 .warmup_min_ratio = 0.1f,
                                                 .warmup_num_steps = 10,
                                                 .cos_min_ratio = 0.2f,
                                                 .warmup_type = nn::WarmupType::kLinear});
  ASSERT_TRUE(expected.ok());
  expect_same_schedule(c, *expected, 100);
  EXPECT_EQ(c.lr_schedule.lr_at(1), 0.0f);                     // DeepSpeed's pre-start rate
  EXPECT_NEAR(c.lr_schedule.lr_at(2), 0.0003f, 1e-9);          // warmup_min_ratio x lr
  EXPECT_NEAR(c.lr_schedule.lr_at(100), 0.2f * 0.003f, 1e-9);  // the floor
}

TEST(TrainConfigTest, TotalNumStepsDefaultsToTrainingSteps) {
  const TrainConfig c = parse_ok(
      patched(R"({"scheduler": {"type": "WarmupCosineLR", "params": {"warmup_num_steps": 5}}})"));
  ASSERT_TRUE(std::holds_alternative<nn::WarmupCosineLrConfig>(c.scheduler));
  EXPECT_EQ(std::get<nn::WarmupCosineLrConfig>(c.scheduler).total_num_steps, 100);
  expect_error(R"({"training": {"steps": 0}, "scheduler": {"type": "WarmupDecayLR"}})",
               "scheduler.params.total_num_steps", "missing; WarmupDecayLR needs it");
  const TrainConfig short_run = parse_ok(patched(R"({"scheduler": {"type": "WarmupDecayLR",
      "params": {"total_num_steps": 50, "warmup_num_steps": 100, "warmup_max_lr": 0.003}}})"));
  EXPECT_TRUE(has_warning(short_run, "total_num_steps 50 < warmup_num_steps 100"))
      << warnings_of(short_run);
}

// ---- optimizers --------------------------------------------------------------

TEST(TrainConfigTest, AdamIsDecoupledAdamWAndSgdReadsItsParams) {
  const TrainConfig adam = parse_ok(patched(
      R"({"optimizer": {"type": "adam", "params": {"lr": 0.01, "weight_decay": 0.1,
          "adam_w_mode": true}}})"));
  EXPECT_EQ(adam.optimizer.type, OptimizerType::kAdamW);
  EXPECT_EQ(adam.optimizer.adamw.weight_decay, 0.1f);
  EXPECT_EQ(adam.lr_schedule.lr_at(1), 0.01f);
  const TrainConfig sgd = parse_ok(patched(R"({"optimizer": {"type": "SGD", "params": {
      "lr": 0.5, "momentum": 0.9, "dampening": 0, "weight_decay": 1e-4, "nesterov": true}}})"));
  EXPECT_EQ(sgd.optimizer.type, OptimizerType::kSgd);
  EXPECT_EQ(sgd.optimizer.sgd.lr, 0.5f);
  EXPECT_EQ(sgd.optimizer.sgd.momentum, 0.9f);
  EXPECT_EQ(sgd.optimizer.sgd.weight_decay, 1e-4f);
  EXPECT_TRUE(sgd.optimizer.sgd.nesterov);
  EXPECT_EQ(sgd.optimizer.lr(), 0.5f);
  expect_error(R"({"optimizer": {"type": "SGD", "params": {"nesterov": true}}})",
               "optimizer.params.nesterov", "needs momentum > 0");
}

// ---- other rules -------------------------------------------------------------

TEST(TrainConfigTest, StepsPerPrintIsLogInterval) {
  EXPECT_EQ(parse_ok(patched(R"({"steps_per_print": 25})")).training.log_interval, 25);
  EXPECT_EQ(parse_ok(patched(R"({"steps_per_print": 25, "training": {"log_interval": 25}})"))
                .training.log_interval,
            25);
  expect_error(R"({"steps_per_print": 25, "training": {"log_interval": 5}})", "steps_per_print",
               "25 != training.log_interval 5");
}

TEST(TrainConfigTest, BfloatSixteenIsBf16sOldName) {
  EXPECT_TRUE(parse_ok(patched(R"({"bfloat16": {"enabled": true}})")).bf16);
  expect_error(R"({"bf16": {"enabled": true}, "bfloat16": {"enabled": true}})", "bfloat16",
               "give only bf16");
}

// ---- to_json -----------------------------------------------------------------

void expect_round_trip(const TrainConfig& c) {
  const std::string text = to_json(c);
  absl::StatusOr<TrainConfig> again = parse_train_config(text);
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << text;
  EXPECT_EQ(to_json(*again), text);
  EXPECT_EQ(again->train_batch_size, c.train_batch_size);
  EXPECT_EQ(again->micro_batch_size, c.micro_batch_size);
  EXPECT_EQ(again->gradient_accumulation_steps, c.gradient_accumulation_steps);
  EXPECT_EQ(again->optimizer.lr(), c.optimizer.lr());
  EXPECT_EQ(again->optimizer.adamw.beta2, c.optimizer.adamw.beta2);
  EXPECT_EQ(again->scheduler.index(), c.scheduler.index());
  EXPECT_EQ(again->model.padded_vocab(), c.model.padded_vocab());
  EXPECT_EQ(again->data.synthetic.has_value(), c.data.synthetic.has_value());
  EXPECT_EQ(again->training.seed, c.training.seed);
  for (int step = 1; step <= 300; ++step) {
    ASSERT_EQ(again->lr_schedule.lr_at(step), c.lr_schedule.lr_at(step)) << "step " << step;
  }
}

TEST(TrainConfigTest, ToJsonRoundTrips) {
  const TrainConfig c = parse_ok(patched(R"({
    "optimizer": {"type": "AdamW", "params": {"lr": 0.003, "betas": [0.9, 0.95]}},
    "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_max_lr": 0.003,
                                                      "warmup_num_steps": 10}},
    "fp16": {"enabled": true, "loss_scale": 128}, "training": {"seed": 18446744073709551615}})"));
  expect_round_trip(c);
  const std::string text = to_json(c);
  EXPECT_TRUE(absl::StrContains(text, "\"lr\": 0.003,")) << text;  // not 0.003000000026077032
  EXPECT_TRUE(absl::StrContains(text, "\"total_num_steps\": 100")) << text;  // the default, filled
  EXPECT_TRUE(absl::StrContains(text, "\"seed\": 18446744073709551615")) << text;
  expect_round_trip(parse_ok(patched(R"({"optimizer": {"type": "SGD", "params": {"lr": 0.1}},
      "data": {"synthetic": null, "path": "data/tinytext"}})")));
  expect_round_trip(parse_ok(patched(R"({"scheduler": {"type": "WarmupCosineLR"}})")));
  const TrainConfig piped = parse_ok(patched(R"({"model": {"n_layer": 4},
      "gradient_accumulation_steps": 2, "train_batch_size": 64, "parallel": {"pp": 2,
      "schedule": "interleaved", "virtual_stages": 2, "partition": [1, 1, 1, 1]}})"));
  expect_round_trip(piped);
  EXPECT_TRUE(absl::StrContains(to_json(piped), "\"schedule\": \"interleaved\"")) << to_json(piped);
  expect_round_trip(parse_ok(patched(R"({"scheduler": {"type": "WarmupLR", "params":
      {"warmup_max_lr": 0.003, "warmup_type": "linear"}}})")));
}

// ---- files -------------------------------------------------------------------

class TempDir {
 public:
  TempDir() {
    path_ = std::filesystem::temp_directory_path() /
            absl::StrCat("troupe_config_test_", ::getpid(), "_",
                         testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

void write_file(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

TEST(TrainConfigTest, LoadReadsAFileAndNamesItInErrors) {
  TempDir dir;
  const std::string missing = dir.file("missing.json");
  absl::StatusOr<TrainConfig> none = load_train_config(missing);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(none.status().message(), missing)) << none.status();

  const std::string good = dir.file("good.json");
  write_file(good, kBase);
  absl::StatusOr<TrainConfig> loaded = load_train_config(good);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->parallel.dp, 2);

  const std::string bad = dir.file("bad.json");
  write_file(bad, "{\n  \"model\": {\"n_layer\": 0}\n}");
  absl::StatusOr<TrainConfig> rejected = load_train_config(bad);
  EXPECT_EQ(rejected.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(rejected.status().message(),
            absl::StrCat(bad, ": model.n_layer: 0 is out of range; must be in [1, 1024]"));
}

TEST(TrainConfigTest, LoadRefusesWhatIsNoConfigFileSayingSo) {
  TempDir dir;
  absl::StatusOr<TrainConfig> directory = load_train_config(dir.file(""));
  EXPECT_EQ(directory.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(directory.status().message(), "is a directory"))
      << directory.status();
  // A device that never ends is read no further than the bound.
  absl::StatusOr<TrainConfig> endless = load_train_config("/dev/zero");
  EXPECT_EQ(endless.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(endless.status().message(), "not a regular file"))
      << endless.status();
  const std::string big = dir.file("big.json");
  write_file(big, std::string(kMaxConfigBytes + 1, ' '));
  absl::StatusOr<TrainConfig> huge = load_train_config(big);
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(huge.status().message(), "larger than 16 MiB")) << huge.status();
}

TEST(TrainConfigTest, CheckDataExistsNamesTheMissingFiles) {
  TempDir dir;
  TrainConfig c = parse_ok(patched(R"({"data": {"synthetic": null, "path": "x"}})"));
  c.data.path = dir.file("tinytext");
  absl::Status both = check_data_exists(c);
  EXPECT_EQ(both.code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(both.message(), c.data.path + ".bin and " + c.data.path + ".json"))
      << both;
  write_file(c.data.path + ".bin", "");
  absl::Status header = check_data_exists(c);
  EXPECT_EQ(header.code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StartsWith(header.message(), "data.path: " + c.data.path + ".json does not"))
      << header;
  write_file(c.data.path + ".json", "{}");
  EXPECT_TRUE(check_data_exists(c).ok());
  // A file itself is llm.c's format, checked when opened.
  c.data.path = dir.file("fineweb_val_000000.bin");
  write_file(c.data.path, "");
  EXPECT_TRUE(check_data_exists(c).ok());
  // Synthetic data needs no files.
  EXPECT_TRUE(check_data_exists(parse_ok(kBase)).ok());
}

TEST(TrainConfigTest, StepsThatDisagreeWithTheSchedulersTotalAreWarnedAbout) {
  TrainConfig c = parse_ok(patched(
      R"({"scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": 100,
          "warmup_num_steps": 10}}, "training": {"steps": 100}})"));
  EXPECT_EQ(steps_schedule_mismatch(c), std::nullopt);
  c.training.steps = 40;  // --steps 40
  std::optional<std::string> early = steps_schedule_mismatch(c);
  ASSERT_TRUE(early.has_value());
  EXPECT_TRUE(absl::StrContains(*early, "trains 40 steps")) << *early;
  EXPECT_TRUE(absl::StrContains(*early, "total_num_steps is 100")) << *early;
  EXPECT_TRUE(absl::StrContains(*early, "ends at step 40, before the rate has decayed")) << *early;
  c.training.steps = 150;
  std::optional<std::string> late = steps_schedule_mismatch(c);
  ASSERT_TRUE(late.has_value());
  EXPECT_TRUE(absl::StrContains(*late, "stays at its minimum for the last 50 steps")) << *late;
  // No scheduler, or one without a total, has nothing to disagree with.
  EXPECT_EQ(steps_schedule_mismatch(parse_ok(kBase)), std::nullopt);
  TrainConfig warmup = parse_ok(
      patched(R"({"scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 10}}})"));
  warmup.training.steps = 7;
  EXPECT_EQ(steps_schedule_mismatch(warmup), std::nullopt);
}

TEST(TrainConfigTest, ValidationDatasetEvalItersAndKeepBest) {
  TrainConfig c = parse_ok(patched(
      R"({"data": {"synthetic": null, "path": "d/train", "val_path": "d/train_val"},
          "training": {"eval_interval": 50, "eval_iters": 20},
          "checkpoint": {"dir": "ck", "keep_best": true}})"));
  EXPECT_EQ(c.data.val_path, "d/train_val");
  EXPECT_EQ(c.training.eval_iters, 20);
  EXPECT_TRUE(c.checkpoint.keep_best);
  // The config's JSON (the manifest's) carries them.
  TrainConfig back = parse_ok(to_json(c));
  EXPECT_EQ(back.data.val_path, "d/train_val");
  EXPECT_EQ(back.training.eval_iters, 20);
  EXPECT_TRUE(back.checkpoint.keep_best);
  expect_error(R"({"data": {"val_path": "v"}})", "data.val_path", "synthetic task");
  expect_error(R"({"checkpoint": {"keep_best": true}})", "checkpoint.keep_best", "checkpoint.dir");
  expect_error(R"({"data": {"synthetic": null, "path": "t"}, "checkpoint": {"dir": "ck",
                   "keep_best": true}})",
               "checkpoint.keep_best", "data.val_path");
  expect_error(R"({"training": {"eval_iters": -1}})", "training.eval_iters", "");
}

TEST(TrainConfigTest, EveryExampleConfigParsesWithoutWarnings) {
  int parsed = 0;
  for (const auto& entry : std::filesystem::directory_iterator(EXAMPLE_CONFIGS)) {
    if (entry.path().extension() != ".json") continue;
    SCOPED_TRACE(entry.path().string());
    absl::StatusOr<TrainConfig> c = load_train_config(entry.path().string());
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_TRUE(c->warnings.empty()) << warnings_of(*c);
    expect_round_trip(*c);
    ++parsed;
  }
  EXPECT_GE(parsed, 4);
}

TEST(TrainConfigTest, MainExampleIsTheReadmesJob) {
  absl::StatusOr<TrainConfig> c =
      load_train_config(std::string(EXAMPLE_CONFIGS) + "/addition_ddp.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->parallel.dp, 2);
  EXPECT_EQ(c->gradient_accumulation_steps, 1);
  EXPECT_EQ(c->micro_batch_size, 16);
  ASSERT_TRUE(c->data.synthetic.has_value());
  EXPECT_EQ(c->data.synthetic->digits, 2);
  EXPECT_TRUE(std::holds_alternative<nn::WarmupCosineLrConfig>(c->scheduler));
  absl::StatusOr<TrainConfig> single =
      load_train_config(std::string(EXAMPLE_CONFIGS) + "/addition_single.json");
  ASSERT_TRUE(single.ok()) << single.status();
  EXPECT_EQ(single->parallel.dp, 1);
  EXPECT_EQ(single->train_batch_size, c->train_batch_size);
}

// scripts/demo.sh trains nanoGPT's CPU configuration for Shakespeare at character level.
TEST(TrainConfigTest, TheQuickStartsJobIsNanoGptsShakespeareChar) {
  absl::StatusOr<TrainConfig> c =
      load_train_config(std::string(EXAMPLE_CONFIGS) + "/shakespeare_char.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model.num_layers(), 4);
  EXPECT_EQ(c->model.num_heads(), 4);
  EXPECT_EQ(c->model.hidden_size(), 128);
  EXPECT_EQ(c->model.max_seq_len(), 64);
  EXPECT_EQ(c->train_batch_size, 12);
  EXPECT_EQ(c->parallel.dp, 2);
  EXPECT_EQ(c->training.steps, 2000);
  EXPECT_FLOAT_EQ(c->optimizer.adamw.lr, 1e-3f);
  EXPECT_EQ(c->data.path, "data/shakespeare_char");
  EXPECT_EQ(c->data.val_path, "data/shakespeare_char_val");
  EXPECT_TRUE(c->checkpoint.keep_best);
}

}  // namespace
}  // namespace troupe::trainers
