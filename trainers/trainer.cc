#include "trainers/trainer.h"
#include "trainers/job_device.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "trainers/data_parallel_trainer.h"
#include "trainers/hybrid_trainer.h"

namespace troupe::trainers {

absl::StatusOr<std::unique_ptr<Trainer>> start_trainer(Cluster& cluster, const TrainConfig& given,
                                                       const std::string& job, int threads) {
  absl::StatusOr<TrainConfig> resolved = with_device_resolved(cluster, given);
  if (!resolved.ok()) return resolved.status();
  const TrainConfig& config = *resolved;
  if (config.parallel.pp > 1 || config.parallel.tp > 1) {
    absl::StatusOr<std::unique_ptr<HybridTrainer>> hybrid =
        HybridTrainer::start(cluster, config, job, threads);
    if (!hybrid.ok()) return hybrid.status();
    return std::unique_ptr<Trainer>(*std::move(hybrid));
  }
  absl::StatusOr<std::unique_ptr<DataParallelTrainer>> ddp =
      DataParallelTrainer::start(cluster, config, job, threads);
  if (!ddp.ok()) return ddp.status();
  return std::unique_ptr<Trainer>(*std::move(ddp));
}

absl::StatusOr<actors::EvalRequest> eval_request(const TrainConfig& config, int samples) {
  if (!config.data.synthetic) {
    return absl::FailedPreconditionError("task accuracy needs a synthetic task (data.synthetic)");
  }
  return actors::EvalRequest{.task = {.digits = config.data.synthetic->digits,
                                      .num_samples = config.data.synthetic->num_samples,
                                      .seed = config.data.synthetic->seed,
                                      .seq_len = config.model.max_seq_len()},
                             .samples = samples};
}

absl::StatusOr<actors::TokenDataset> validation_dataset(const TrainConfig& config) {
  if (config.data.val_path.empty()) {
    return absl::FailedPreconditionError("validation needs a validation dataset (data.val_path)");
  }
  return actors::TokenDataset::open(config.data.val_path);
}

actors::ValidationRequest validation_request(const TrainConfig& config, int rank, int world) {
  const int B = static_cast<int>(std::max<int64_t>(config.micro_batch_size, 1));
  return actors::ValidationRequest{.path = config.data.val_path,
                                   .seq_len = config.model.max_seq_len(),
                                   .batch = B,
                                   .rank = rank,
                                   .world = world,
                                   .max_windows = config.training.eval_iters * B};
}

actors::LoaderOptions loader_options(const TrainConfig& config, const std::string& job, int rank) {
  actors::LoaderOptions o;
  if (config.data.synthetic) {
    o.task = config.data.synthetic->task;
    o.addition = {.digits = config.data.synthetic->digits,
                  .num_samples = config.data.synthetic->num_samples,
                  .seed = config.data.synthetic->seed,
                  .seq_len = config.model.max_seq_len()};
  } else {
    o.path = config.data.path;
  }
  o.seq_len = config.model.max_seq_len();
  o.micro_batch = static_cast<int>(config.micro_batch_size);
  o.grad_accum = static_cast<int>(config.gradient_accumulation_steps);
  o.dp = config.parallel.dp;
  o.rank = rank;
  o.seed = config.training.seed;
  o.shuffle = config.data.shuffle;
  o.prefetch = config.data.prefetch;
  o.start_position = 0;
  o.job = job;
  return o;
}

actors::OptimizerSpec optimizer_spec(const OptimizerConfig& o) {
  actors::OptimizerSpec spec;
  if (o.type == OptimizerType::kAdamW) {
    spec.kind = actors::OptimizerSpec::kAdamW;
    spec.beta1 = o.adamw.beta1;
    spec.beta2 = o.adamw.beta2;
    spec.eps = o.adamw.eps;
    spec.weight_decay = o.adamw.weight_decay;
  } else {
    spec.kind = actors::OptimizerSpec::kSgd;
    spec.momentum = o.sgd.momentum;
    spec.dampening = o.sgd.dampening;
    spec.weight_decay = o.sgd.weight_decay;
    spec.nesterov = o.sgd.nesterov;
  }
  return spec;
}

nn::DType compute_precision(const TrainConfig& c) {
  if (c.fp16.enabled) return nn::DType::kFloat16;
  if (c.bf16) return nn::DType::kBFloat16;
  return nn::DType::kFloat32;
}

ControllerOptions controller_options(const TrainConfig& config) {
  ControllerOptions options{.lr_schedule = config.lr_schedule,
                            .gradient_clipping = static_cast<float>(config.gradient_clipping)};
  if (config.fp16.enabled) {
    if (config.fp16.static_loss_scale > 0) {
      options.static_loss_scale = config.fp16.static_loss_scale;
    } else {
      options.dynamic_loss_scale = config.fp16.dynamic;
    }
  }
  if (config.fault_tolerance.enabled) {
    options.step_timeout = absl::Seconds(config.fault_tolerance.step_timeout_s);
  }
  return options;
}

}  // namespace troupe::trainers
