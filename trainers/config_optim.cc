// DeepSpeed's optimizer, scheduler, fp16/bf16 and zero_optimization sections
// (see config_sections.h).
#include <algorithm>
#include <array>
#include <cctype>
#include <climits>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/strings/str_cat.h"
#include "nn/model/layout.h"
#include "trainers/config.h"
#include "trainers/config_reader.h"
#include "trainers/config_sections.h"

namespace troupe::trainers::config_detail {
namespace {

constexpr absl::string_view kOptimizers =
    "AdamW, Adam (with adam_w_mode true, DeepSpeed's default), SGD";
constexpr absl::string_view kSchedulers = "WarmupLR, WarmupDecayLR, WarmupCosineLR";

std::string lower(absl::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

// The type of an `optimizer` or `scheduler` section; a missing one is an error.
absl::Status read_type(JsonObject& s, std::string* type) {
  TROUPE_CONFIG_RETURN_IF_ERROR(s.read("type", type));
  if (type->empty()) {
    return config_error(absl::StrCat(s.key_path("type"), ": missing"));
  }
  return absl::OkStatus();
}

// `params` of a section, or an empty object when absent.
absl::StatusOr<JsonObject> read_params(JsonObject& s, const Json& empty) {
  absl::StatusOr<std::optional<JsonObject>> params = s.section("params");
  if (!params.ok()) return params.status();
  if (params->has_value()) return **params;
  return JsonObject(empty, s.key_path("params"));
}

// "betas": [b1, b2], each in [0, 1).
absl::Status read_betas(JsonObject& p, nn::AdamWConfig* adamw) {
  const Json* betas = p.find("betas");
  if (betas == nullptr) return absl::OkStatus();
  if (!betas->is_array() || betas->size() != 2 || !(*betas)[0].is_number() ||
      !(*betas)[1].is_number()) {
    const std::string found =
        betas->is_array()
            ? absl::StrCat("an array of ", betas->size(),
                           betas->size() == 2 ? " that are not both numbers" : " elements")
            : describe(*betas);
    return config_error(
        absl::StrCat(p.key_path("betas"), ": expected [beta1, beta2], found ", found));
  }
  float* out[2] = {&adamw->beta1, &adamw->beta2};
  for (size_t i = 0; i < 2; ++i) {
    const double b = (*betas)[i].get<double>();
    if (!(b >= 0 && b < 1)) {
      return config_error(absl::StrCat(p.key_path("betas"), "[", i, "]: ", (*betas)[i].dump(),
                                       " is out of range; must be in [0, 1)"));
    }
    *out[i] = static_cast<float>(b);
  }
  return absl::OkStatus();
}

absl::Status parse_adam(JsonObject& p, bool adam_type, nn::AdamWConfig* adamw) {
  TROUPE_CONFIG_RETURN_IF_ERROR(p.read("lr", &adamw->lr, 0));
  TROUPE_CONFIG_RETURN_IF_ERROR(read_betas(p, adamw));
  TROUPE_CONFIG_RETURN_IF_ERROR(p.read("eps", &adamw->eps, 0));
  TROUPE_CONFIG_RETURN_IF_ERROR(p.read("weight_decay", &adamw->weight_decay, 0));
  // DeepSpeed's flags: torch_adam picks torch's kernel over its fused one
  // (the same update); adam_w_mode false makes type Adam couple the decay
  // into the gradient (L2), and is ignored for type AdamW.
  bool torch_adam = false, adam_w_mode = true, amsgrad = false, bias_correction = true;
  TROUPE_CONFIG_RETURN_IF_ERROR(p.read("torch_adam", &torch_adam));
  TROUPE_CONFIG_RETURN_IF_ERROR(p.read("adam_w_mode", &adam_w_mode));
  TROUPE_CONFIG_RETURN_IF_ERROR(p.read("amsgrad", &amsgrad));
  TROUPE_CONFIG_RETURN_IF_ERROR(p.read("bias_correction", &bias_correction));
  TROUPE_CONFIG_RETURN_IF_ERROR(
      p.check_unknown(adam_type ? " for optimizer type Adam" : " for optimizer type AdamW"));
  if (adam_type && !adam_w_mode) {
    return config_error(absl::StrCat(p.key_path("adam_w_mode"),
                                     ": false (Adam with L2-coupled weight decay) is not "
                                     "implemented; use true (decoupled, as AdamW)"));
  }
  if (amsgrad) {
    return config_error(absl::StrCat(p.key_path("amsgrad"), ": true is not implemented"));
  }
  if (!bias_correction) {
    return config_error(absl::StrCat(p.key_path("bias_correction"), ": false is not implemented"));
  }
  if (absl::Status s = nn::validate(*adamw); !s.ok()) {
    return config_error(absl::StrCat(p.path(), ": ", s.message()));
  }
  return absl::OkStatus();
}

absl::Status parse_sgd(JsonObject& p, nn::SgdConfig* sgd) {
  TROUPE_CONFIG_RETURN_IF_ERROR(p.read("lr", &sgd->lr, 0));
  TROUPE_CONFIG_RETURN_IF_ERROR(p.read("momentum", &sgd->momentum, 0));
  TROUPE_CONFIG_RETURN_IF_ERROR(p.read("dampening", &sgd->dampening, -FLT_MAX));
  TROUPE_CONFIG_RETURN_IF_ERROR(p.read("weight_decay", &sgd->weight_decay, 0));
  TROUPE_CONFIG_RETURN_IF_ERROR(p.read("nesterov", &sgd->nesterov));
  TROUPE_CONFIG_RETURN_IF_ERROR(p.check_unknown(" for optimizer type SGD"));
  if (sgd->nesterov && (sgd->momentum <= 0 || sgd->dampening != 0)) {
    return config_error(absl::StrCat(p.key_path("nesterov"),
                                     ": true needs momentum > 0 and dampening 0 (momentum ",
                                     sgd->momentum, ", dampening ", sgd->dampening, ")"));
  }
  if (absl::Status s = nn::validate(*sgd); !s.ok()) {
    return config_error(absl::StrCat(p.path(), ": ", s.message()));
  }
  return absl::OkStatus();
}

absl::Status read_warmup_type(JsonObject& p, nn::WarmupType* type) {
  std::string name;
  TROUPE_CONFIG_RETURN_IF_ERROR(p.read("warmup_type", &name));
  if (name.empty()) return absl::OkStatus();
  if (name == "log") {
    *type = nn::WarmupType::kLog;
  } else if (name == "linear") {
    *type = nn::WarmupType::kLinear;
  } else {
    return config_error(absl::StrCat(p.key_path("warmup_type"), ": \"", name,
                                     "\" is not a warmup type; use \"log\" or \"linear\""));
  }
  return absl::OkStatus();
}

// total_num_steps of WarmupDecayLR and WarmupCosineLR: required by DeepSpeed;
// troupe defaults it to training.steps when that is set.
absl::Status read_total_steps(JsonObject& p, absl::string_view type, const TrainConfig& config,
                              int* total) {
  if (!p.has("total_num_steps")) {
    if (config.training.steps <= 0) {
      return config_error(absl::StrCat(p.key_path("total_num_steps"), ": missing; ", type,
                                       " needs it (or set training.steps, its default)"));
    }
    if (config.training.steps > INT_MAX) {
      return config_error(absl::StrCat(p.key_path("total_num_steps"),
                                       ": missing, and its default "
                                       "training.steps ",
                                       config.training.steps, " is over ", INT_MAX));
    }
    *total = static_cast<int>(config.training.steps);
    return absl::OkStatus();
  }
  return p.read("total_num_steps", total, 0);
}

// DeepSpeed's last_batch_iteration: where a resumed schedule starts.
absl::Status read_last_batch_iteration(JsonObject& p) {
  int iteration = -1;
  TROUPE_CONFIG_RETURN_IF_ERROR(p.read("last_batch_iteration", &iteration, INT_MIN));
  if (iteration != -1) {
    return config_error(absl::StrCat(p.key_path("last_batch_iteration"), ": ", iteration,
                                     ": starting a schedule part-way is not implemented; use -1"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status parse_optimizer(JsonObject& top, TrainConfig* config) {
  TROUPE_CONFIG_RETURN_IF_ERROR(top.read("gradient_clipping", &config->gradient_clipping, 0));
  OptimizerConfig& o = config->optimizer;
  absl::StatusOr<std::optional<JsonObject>> section = top.section("optimizer");
  if (!section.ok()) return section.status();
  if (!section->has_value()) return absl::OkStatus();
  JsonObject& s = **section;
  std::string type;
  TROUPE_CONFIG_RETURN_IF_ERROR(read_type(s, &type));
  const Json empty = Json::object();
  absl::StatusOr<JsonObject> params = read_params(s, empty);
  if (!params.ok()) return params.status();
  TROUPE_CONFIG_RETURN_IF_ERROR(s.check_unknown());
  // DeepSpeed matches its own optimizers' names in any case.
  const std::string name = lower(type);
  if (name == "adamw" || name == "adam") {
    o.type = OptimizerType::kAdamW;
    return parse_adam(*params, name == "adam", &o.adamw);
  }
  if (name == "sgd") {
    o.type = OptimizerType::kSgd;
    return parse_sgd(*params, &o.sgd);
  }
  static const std::vector<std::string> kKnown = {"AdamW", "Adam", "SGD"};
  constexpr std::array<absl::string_view, 11> kDeepSpeedOnly = {
      "lamb",   "onebitadam", "zerooneadam", "onebitlamb", "adagrad", "lion",
      "muadam", "muadamw",    "musgd",       "fusedadam",  "cpuadam"};
  const bool deepspeed_type =
      std::find(kDeepSpeedOnly.begin(), kDeepSpeedOnly.end(), name) != kDeepSpeedOnly.end();
  return config_error(absl::StrCat(s.key_path("type"), ": \"", type, "\" is ",
                                   deepspeed_type ? "not implemented" : "not an optimizer",
                                   did_you_mean(type, kKnown), "; supported: ", kOptimizers));
}

absl::Status parse_scheduler(JsonObject& top, TrainConfig* config) {
  const float base_lr = config->optimizer.lr();
  absl::StatusOr<std::optional<JsonObject>> section = top.section("scheduler");
  if (!section.ok()) return section.status();
  if (!section->has_value()) {
    config->scheduler = std::monostate();
    config->lr_schedule = nn::LrSchedule::constant(base_lr);
    return absl::OkStatus();
  }
  JsonObject& s = **section;
  std::string type;
  TROUPE_CONFIG_RETURN_IF_ERROR(read_type(s, &type));
  const Json empty = Json::object();
  absl::StatusOr<JsonObject> params = read_params(s, empty);
  if (!params.ok()) return params.status();
  TROUPE_CONFIG_RETURN_IF_ERROR(s.check_unknown());
  JsonObject& p = *params;

  absl::StatusOr<nn::LrSchedule> schedule = absl::UnknownError("unset");
  int warmup_num_steps = 0, total_num_steps = 0;
  if (type == "WarmupLR" || type == "WarmupDecayLR") {
    nn::WarmupDecayLrConfig c;  // WarmupLR's fields and total_num_steps
    TROUPE_CONFIG_RETURN_IF_ERROR(p.read("warmup_min_lr", &c.warmup_min_lr, 0));
    const bool has_max_lr = p.has("warmup_max_lr");
    TROUPE_CONFIG_RETURN_IF_ERROR(p.read("warmup_max_lr", &c.warmup_max_lr, 0));
    TROUPE_CONFIG_RETURN_IF_ERROR(p.read("warmup_num_steps", &c.warmup_num_steps, 1));
    TROUPE_CONFIG_RETURN_IF_ERROR(read_warmup_type(p, &c.warmup_type));
    if (type == "WarmupDecayLR") {
      TROUPE_CONFIG_RETURN_IF_ERROR(read_total_steps(p, type, *config, &c.total_num_steps));
    }
    TROUPE_CONFIG_RETURN_IF_ERROR(read_last_batch_iteration(p));
    TROUPE_CONFIG_RETURN_IF_ERROR(p.check_unknown(absl::StrCat(" for scheduler type ", type)));
    if (!has_max_lr && c.warmup_max_lr != base_lr) {
      config->warnings.push_back(absl::StrCat(p.key_path("warmup_max_lr"), " is not set: ", type,
                                              " uses DeepSpeed's default ", c.warmup_max_lr,
                                              ", not optimizer.params.lr ", base_lr));
    }
    warmup_num_steps = c.warmup_num_steps;
    total_num_steps = c.total_num_steps;
    if (type == "WarmupLR") {
      const nn::WarmupLrConfig w = {.warmup_min_lr = c.warmup_min_lr,
                                    .warmup_max_lr = c.warmup_max_lr,
                                    .warmup_num_steps = c.warmup_num_steps,
                                    .warmup_type = c.warmup_type};
      config->scheduler = w;
      schedule = nn::LrSchedule::warmup(w);
    } else {
      config->scheduler = c;
      schedule = nn::LrSchedule::warmup_decay(c);
    }
  } else if (type == "WarmupCosineLR") {
    nn::WarmupCosineLrConfig c;
    c.base_lr = base_lr;
    TROUPE_CONFIG_RETURN_IF_ERROR(read_total_steps(p, type, *config, &c.total_num_steps));
    TROUPE_CONFIG_RETURN_IF_ERROR(p.read("warmup_min_ratio", &c.warmup_min_ratio, 0));
    TROUPE_CONFIG_RETURN_IF_ERROR(p.read("warmup_num_steps", &c.warmup_num_steps, 1));
    TROUPE_CONFIG_RETURN_IF_ERROR(p.read("cos_min_ratio", &c.cos_min_ratio, 0));
    TROUPE_CONFIG_RETURN_IF_ERROR(read_warmup_type(p, &c.warmup_type));
    TROUPE_CONFIG_RETURN_IF_ERROR(read_last_batch_iteration(p));
    TROUPE_CONFIG_RETURN_IF_ERROR(p.check_unknown(" for scheduler type WarmupCosineLR"));
    warmup_num_steps = c.warmup_num_steps;
    total_num_steps = c.total_num_steps;
    config->scheduler = c;
    schedule = nn::LrSchedule::warmup_cosine(c);
  } else {
    static const std::vector<std::string> kKnown = {"WarmupLR", "WarmupDecayLR", "WarmupCosineLR"};
    const bool deepspeed_type = type == "OneCycle" || type == "LRRangeTest";
    return config_error(absl::StrCat(s.key_path("type"), ": \"", type, "\" is ",
                                     deepspeed_type ? "not implemented" : "not a scheduler",
                                     did_you_mean(type, kKnown), "; supported: ", kSchedulers));
  }
  if (!schedule.ok()) {
    return config_error(absl::StrCat(p.path(), ": ", schedule.status().message()));
  }
  config->lr_schedule = *schedule;
  if (type != "WarmupLR" && total_num_steps < warmup_num_steps) {
    config->warnings.push_back(absl::StrCat(p.key_path("total_num_steps"), " ", total_num_steps,
                                            " < warmup_num_steps ", warmup_num_steps,
                                            ": the decay never starts"));
  }
  return absl::OkStatus();
}

absl::Status parse_precision(JsonObject& top, TrainConfig* config) {
  Fp16Config& f = config->fp16;
  absl::StatusOr<std::optional<JsonObject>> fp16 = top.section("fp16");
  if (!fp16.ok()) return fp16.status();
  if (fp16->has_value()) {
    JsonObject& s = **fp16;
    nn::LossScalerConfig& d = f.dynamic;
    TROUPE_CONFIG_RETURN_IF_ERROR(s.read("enabled", &f.enabled));
    TROUPE_CONFIG_RETURN_IF_ERROR(s.read("loss_scale", &f.static_loss_scale, 0));
    TROUPE_CONFIG_RETURN_IF_ERROR(s.read("initial_scale_power", &d.initial_scale_power, -126, 126));
    TROUPE_CONFIG_RETURN_IF_ERROR(s.read("loss_scale_window", &d.scale_window, 1));
    TROUPE_CONFIG_RETURN_IF_ERROR(s.read("hysteresis", &d.hysteresis, 1));
    TROUPE_CONFIG_RETURN_IF_ERROR(s.read("consecutive_hysteresis", &d.consecutive_hysteresis));
    TROUPE_CONFIG_RETURN_IF_ERROR(s.read("min_loss_scale", &d.min_scale, 0));
    s.warn_unimplemented("auto_cast", &config->warnings);
    s.warn_unimplemented("fp16_master_weights_and_grads", &config->warnings);
    TROUPE_CONFIG_RETURN_IF_ERROR(s.check_unknown());
    if (d.min_scale <= 0) {
      return config_error(absl::StrCat(s.key_path("min_loss_scale"), ": ", d.min_scale,
                                       " is out of range; must be > 0"));
    }
    if (absl::StatusOr<nn::DynamicLossScaler> scaler = nn::DynamicLossScaler::create(d);
        !scaler.ok()) {
      return config_error(absl::StrCat(s.path(), ": ", scaler.status().message()));
    }
  }
  if (top.has("bf16") && top.has("bfloat16")) {
    return config_error("bfloat16: the old name of bf16; give only bf16");
  }
  for (absl::string_view key : {"bf16", "bfloat16"}) {
    absl::StatusOr<std::optional<JsonObject>> bf16 = top.section(key);
    if (!bf16.ok()) return bf16.status();
    if (!bf16->has_value()) continue;
    JsonObject& s = **bf16;
    TROUPE_CONFIG_RETURN_IF_ERROR(s.read("enabled", &config->bf16));
    for (absl::string_view unimplemented :
         {"immediate_grad_update", "check_grad_overflow", "bf16_master_weights_and_grads",
          "bf16_optimizer_states"}) {
      s.warn_unimplemented(unimplemented, &config->warnings);
    }
    TROUPE_CONFIG_RETURN_IF_ERROR(s.check_unknown());
    if (f.enabled && config->bf16) {
      return config_error(
          absl::StrCat(s.key_path("enabled"), ": fp16 and bf16 are both enabled; enable one"));
    }
  }
  return absl::OkStatus();
}

absl::Status parse_zero(JsonObject& top, TrainConfig* config) {
  ZeroConfig& z = config->zero;
  absl::StatusOr<std::optional<JsonObject>> section = top.section("zero_optimization");
  if (!section.ok()) return section.status();
  if (!section->has_value()) return absl::OkStatus();
  JsonObject& s = **section;
  TROUPE_CONFIG_RETURN_IF_ERROR(s.read("stage", &z.stage, 0, 3));
  TROUPE_CONFIG_RETURN_IF_ERROR(s.read("reduce_bucket_size", &z.reduce_bucket_size, 1));
  TROUPE_CONFIG_RETURN_IF_ERROR(s.read("overlap_comm", &z.overlap_comm));
  TROUPE_CONFIG_RETURN_IF_ERROR(s.read("contiguous_gradients", &z.contiguous_gradients));
  // Stage 3's, under DeepSpeed's names and their short aliases.
  constexpr int64_t kMaxElements = int64_t{1} << 50;
  for (absl::string_view key : {"stage3_prefetch_bucket_size", "prefetch_bucket_size"})
    TROUPE_CONFIG_RETURN_IF_ERROR(s.read(key, &z.stage3_prefetch_bucket_size, 0, kMaxElements));
  for (absl::string_view key :
       {"stage3_param_persistence_threshold", "param_persistence_threshold"})
    TROUPE_CONFIG_RETURN_IF_ERROR(
        s.read(key, &z.stage3_param_persistence_threshold, 0, kMaxElements));
  for (absl::string_view key : {"stage3_max_live_parameters", "max_live_parameters"})
    TROUPE_CONFIG_RETURN_IF_ERROR(s.read(key, &z.stage3_max_live_parameters, 0, kMaxElements));
  for (absl::string_view key :
       {"stage3_gather_16bit_weights_on_model_save", "gather_16bit_weights_on_model_save",
        "stage3_gather_fp16_weights_on_model_save"}) {
    TROUPE_CONFIG_RETURN_IF_ERROR(s.read(key, &z.stage3_gather_16bit_weights_on_model_save));
  }
  // DeepSpeed's other zero_optimization keys (deepspeed/runtime/zero/config.py).
  constexpr std::array<absl::string_view, 33> kUnimplemented = {
      "allgather_partitions",
      "allgather_bucket_size",
      "reduce_scatter",
      "load_from_fp32_weights",
      "elastic_checkpoint",
      "offload_param",
      "offload_optimizer",
      "sub_group_size",
      "cpu_offload",
      "cpu_offload_params",
      "cpu_offload_use_pin_memory",
      "model_persistence_threshold",
      "max_reuse_distance",
      "stage3_model_persistence_threshold",
      "stage3_max_reuse_distance",
      "ignore_unused_parameters",
      "legacy_stage1",
      "round_robin_gradients",
      "grad_hooks",
      "zero_hpz_partition_size",
      "zero_quantized_weights",
      "zero_quantized_nontrainable_weights",
      "zero_quantized_gradients",
      "mics_shard_size",
      "mics_hierarchical_params_gather",
      "memory_efficient_linear",
      "pipeline_loading_checkpoint",
      "override_module_apply",
      "use_all_reduce_for_fetch_params",
      "stage3_use_all_reduce_for_fetch_params",
      "module_granularity_threshold",
      "stage3_module_granularity_threshold",
      "log_trace_cache_warnings",
  };
  for (absl::string_view key : kUnimplemented)
    s.warn_unimplemented(key, &config->warnings);
  TROUPE_CONFIG_RETURN_IF_ERROR(s.check_unknown());
  // ZeRO-3 gathers a segment (a block, the embeddings) whole: a bound below
  // the largest cannot be honoured (the model and dp were read before).
  if (z.stage == 3 && config->parallel.dp > 1) {
    size_t largest = 0;
    for (const nn::ParamRange& r : nn::model_layout(config->model).segment_ranges())
      largest = std::max(largest, r.size());
    if (z.stage3_max_live_parameters < static_cast<int64_t>(largest)) {
      return config_error(absl::StrCat(
          s.key_path("stage3_max_live_parameters"), ": ", z.stage3_max_live_parameters,
          " is below the ", largest,
          " parameters of the model's largest segment (a block, or the embeddings), which "
          "ZeRO-3 gathers whole; raise it to at least ",
          largest));
    }
  }
  return absl::OkStatus();
}

}  // namespace troupe::trainers::config_detail
