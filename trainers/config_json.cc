// to_json: a TrainConfig back as the JSON parse_train_config reads.
#include <string>
#include <type_traits>
#include <variant>

#include "nn/model/config_json.h"
#include "trainers/config.h"
#include "trainers/config_reader.h"

namespace troupe::trainers {
namespace {

using config_detail::float_for_json;
using config_detail::Json;

const char* warmup_type_name(nn::WarmupType type) {
  return type == nn::WarmupType::kLog ? "log" : "linear";
}

Json optimizer_json(const OptimizerConfig& o) {
  Json params;
  if (o.type == OptimizerType::kAdamW) {
    params["lr"] = float_for_json(o.adamw.lr);
    params["betas"] = {float_for_json(o.adamw.beta1), float_for_json(o.adamw.beta2)};
    params["eps"] = float_for_json(o.adamw.eps);
    params["weight_decay"] = float_for_json(o.adamw.weight_decay);
    return {{"type", "AdamW"}, {"params", params}};
  }
  params["lr"] = float_for_json(o.sgd.lr);
  params["momentum"] = float_for_json(o.sgd.momentum);
  params["dampening"] = float_for_json(o.sgd.dampening);
  params["weight_decay"] = float_for_json(o.sgd.weight_decay);
  params["nesterov"] = o.sgd.nesterov;
  return {{"type", "SGD"}, {"params", params}};
}

// Null for no scheduler.
Json scheduler_json(const SchedulerConfig& scheduler) {
  return std::visit(
      [](const auto& c) -> Json {
        using C = std::decay_t<decltype(c)>;
        Json params;
        if constexpr (std::is_same_v<C, std::monostate>) {
          return nullptr;
        } else if constexpr (std::is_same_v<C, nn::WarmupCosineLrConfig>) {
          params["total_num_steps"] = c.total_num_steps;
          params["warmup_min_ratio"] = float_for_json(c.warmup_min_ratio);
          params["warmup_num_steps"] = c.warmup_num_steps;
          params["cos_min_ratio"] = float_for_json(c.cos_min_ratio);
          params["warmup_type"] = warmup_type_name(c.warmup_type);
          return {{"type", "WarmupCosineLR"}, {"params", params}};
        } else {
          constexpr bool kDecay = std::is_same_v<C, nn::WarmupDecayLrConfig>;
          if constexpr (kDecay) params["total_num_steps"] = c.total_num_steps;
          params["warmup_min_lr"] = float_for_json(c.warmup_min_lr);
          params["warmup_max_lr"] = float_for_json(c.warmup_max_lr);
          params["warmup_num_steps"] = c.warmup_num_steps;
          params["warmup_type"] = warmup_type_name(c.warmup_type);
          return {{"type", kDecay ? "WarmupDecayLR" : "WarmupLR"}, {"params", params}};
        }
      },
      scheduler);
}

}  // namespace

std::string to_json(const TrainConfig& c) {
  Json j;
  j["device"] = device_choice_name(c.device);
  j["train_batch_size"] = c.train_batch_size;
  j["train_micro_batch_size_per_gpu"] = c.micro_batch_size;
  j["gradient_accumulation_steps"] = c.gradient_accumulation_steps;
  j["gradient_clipping"] = c.gradient_clipping;
  j["optimizer"] = optimizer_json(c.optimizer);
  if (Json scheduler = scheduler_json(c.scheduler); !scheduler.is_null()) {
    j["scheduler"] = scheduler;
  }
  j["fp16"] = {{"enabled", c.fp16.enabled},
               {"loss_scale", c.fp16.static_loss_scale},
               {"initial_scale_power", c.fp16.dynamic.initial_scale_power},
               {"loss_scale_window", c.fp16.dynamic.scale_window},
               {"hysteresis", c.fp16.dynamic.hysteresis},
               {"consecutive_hysteresis", c.fp16.dynamic.consecutive_hysteresis},
               {"min_loss_scale", c.fp16.dynamic.min_scale}};
  j["bf16"] = {{"enabled", c.bf16}};
  j["zero_optimization"] = {{"stage", c.zero.stage},
                            {"reduce_bucket_size", c.zero.reduce_bucket_size},
                            {"overlap_comm", c.zero.overlap_comm},
                            {"contiguous_gradients", c.zero.contiguous_gradients}};
  if (c.zero.stage == 3) {
    Json& z = j["zero_optimization"];
    z["stage3_prefetch_bucket_size"] = c.zero.stage3_prefetch_bucket_size;
    z["stage3_param_persistence_threshold"] = c.zero.stage3_param_persistence_threshold;
    z["stage3_max_live_parameters"] = c.zero.stage3_max_live_parameters;
    z["stage3_gather_16bit_weights_on_model_save"] =
        c.zero.stage3_gather_16bit_weights_on_model_save;
  }
  j["model"] = nn::model_config_to_json(c.model);
  j["model"]["recompute_activations"] = c.model_options.recompute_activations;
  Json data;
  if (c.data.synthetic) {
    const SyntheticTaskConfig& s = *c.data.synthetic;
    data["synthetic"] = {
        {"task", s.task}, {"digits", s.digits}, {"num_samples", s.num_samples}, {"seed", s.seed}};
  } else {
    data["path"] = c.data.path;
  }
  if (!c.data.val_path.empty()) data["val_path"] = c.data.val_path;
  data["shuffle"] = c.data.shuffle;
  data["prefetch"] = c.data.prefetch;
  j["data"] = data;
  j["parallel"] = {{"dp", c.parallel.dp},
                   {"pp", c.parallel.pp},
                   {"tp", c.parallel.tp},
                   {"schedule", actors::pipeline::schedule_name(c.parallel.schedule)},
                   {"virtual_stages", c.parallel.virtual_stages},
                   {"partition", c.parallel.partition},
                   {"partition_method", c.parallel.partition_method}};
  const TrainingConfig& t = c.training;
  j["training"] = {{"steps", t.steps},
                   {"seed", t.seed},
                   {"log_interval", t.log_interval},
                   {"metrics_file", t.metrics_file},
                   {"tensorboard_dir", t.tensorboard_dir},
                   {"report_metrics", t.report_metrics},
                   {"output_dir", t.output_dir},
                   {"eval_interval", t.eval_interval},
                   {"eval_samples", t.eval_samples},
                   {"eval_iters", t.eval_iters},
                   {"peak_flops", t.peak_flops},
                   {"threads", t.threads},
                   {"init_from", t.init_from}};
  const CheckpointConfig& k = c.checkpoint;
  j["checkpoint"] = {{"dir", k.dir},
                     {"interval_steps", k.interval_steps},
                     {"keep", k.keep},
                     {"keep_best", k.keep_best},
                     {"async", k.async}};
  const FaultToleranceConfig& f = c.fault_tolerance;
  j["fault_tolerance"] = {{"enabled", f.enabled},
                          {"spare_nodes", f.spare_nodes},
                          {"max_failures", f.max_failures},
                          {"wait_for_node_s", f.wait_for_node_s},
                          {"step_timeout_s", f.step_timeout_s}};
  const ElasticityConfig& e = c.elasticity;
  j["elasticity"] = {{"enabled", e.enabled},
                     {"min_dp", e.min_dp},
                     {"max_dp", e.max_dp},
                     {"micro_batch_sizes", e.micro_batch_sizes}};
  return j.dump(2);
}

}  // namespace troupe::trainers
