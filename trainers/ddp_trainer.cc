#include "trainers/ddp_trainer.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "actors/mesh.h"
#include "core/cluster/collective_group.h"

namespace troupe::trainers {
namespace {

constexpr absl::Duration kSetupTimeout = absl::Seconds(120);

actors::ModelSpec model_spec(const ModelConfig& m) {
  nn::GPTConfig g = m.gpt();
  return {.n_layer = m.n_layer,
          .n_head = m.n_head,
          .n_embd = m.n_embd,
          .seq_len = m.seq_len,
          .vocab_size = m.vocab_size,
          .padded_vocab_size = g.padded_vocab(),
          .recompute_activations = m.recompute_activations};
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

actors::Precision precision(const TrainConfig& c) {
  if (c.fp16.enabled) return actors::Precision::kFp16;
  if (c.bf16) return actors::Precision::kBf16;
  return actors::Precision::kFp32;
}

}  // namespace

actors::LoaderOptions loader_options(const TrainConfig& config, const std::string& job, int rank) {
  actors::LoaderOptions o;
  if (config.data.synthetic) {
    o.task = config.data.synthetic->task;
    o.addition = {.digits = config.data.synthetic->digits,
                  .num_samples = config.data.synthetic->num_samples,
                  .seed = config.data.synthetic->seed,
                  .seq_len = config.model.seq_len};
  } else {
    o.path = config.data.path;
  }
  o.seq_len = config.model.seq_len;
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

absl::StatusOr<std::unique_ptr<DdpTrainer>> DdpTrainer::start(Cluster& cluster,
                                                              const TrainConfig& config,
                                                              const std::string& job, int threads) {
  std::unique_ptr<DdpTrainer> trainer(new DdpTrainer(cluster, config, job));
  if (absl::Status s = trainer->spawn_replicas(threads); !s.ok()) {
    trainer->stop().IgnoreError();
    return s;
  }
  return trainer;
}

DdpTrainer::~DdpTrainer() {
  stop().IgnoreError();
}

absl::Status DdpTrainer::spawn_replicas(int threads) {
  const int dp = config_.parallel.dp;
  // One bundle per replica, on different nodes where there are enough.
  std::vector<std::string> bundles(dp, "CPU=1");
  absl::StatusOr<cluster::PlacementGroupId> pg = cluster_.create_placement_group(
      bundles, cluster::PlacementStrategy::kSpread, job_ + "/replicas");
  if (!pg.ok()) return pg.status();
  placement_group_ = *pg;
  if (absl::Status s = cluster_.wait_placement_group(*pg, kSetupTimeout); !s.ok()) {
    return absl::Status(s.code(),
                        absl::StrCat("placing ", dp, " replicas (one CPU each): ", s.message()));
  }
  const actors::Mesh mesh{.dp = dp, .pp = 1, .tp = 1};
  const std::string group = job_ + "/dp";
  std::vector<ActorId> stage_ids;
  for (int d = 0; d < dp; ++d) {
    const actors::Coordinate at{.d = d, .p = 0, .t = 0};
    SpawnOptions where{.resources = "", .placement_group = pg->value, .bundle_index = d};
    SpawnOptions loader_where = where;
    loader_where.name = actors::actor_name(job_, "loader", at);
    absl::StatusOr<ActorRef<actors::DataLoaderActor>> loader =
        cluster_.spawn<actors::DataLoaderActor>(loader_where, loader_options(config_, job_, d));
    if (!loader.ok()) return loader.status();
    actors_.push_back(loader->id());
    loaders_.push_back(*loader);

    SpawnOptions stage_where = where;
    stage_where.name = actors::actor_name(job_, "stage", at);
    stage_where.resources = "CPU=1";
    stage_where.dedicated_thread = true;
    actors::StageOptions stage_options{
        .job = job_,
        .at = at,
        .mesh = mesh,
        .model = model_spec(config_.model),
        .micro_batch = static_cast<int>(config_.micro_batch_size),
        .grad_accum = static_cast<int>(config_.gradient_accumulation_steps),
        .bucket_elements = config_.zero.reduce_bucket_size,
        .overlap_comm = config_.zero.overlap_comm,
        .threads = threads,
        .group = group,
        .transport = "",
        .precision = precision(config_)};
    absl::StatusOr<ActorRef<actors::PipelineStageActor>> stage =
        cluster_.spawn<actors::PipelineStageActor>(stage_where, stage_options);
    if (!stage.ok()) return stage.status();
    actors_.push_back(stage->id());
    stage_ids.push_back(stage->id());

    SpawnOptions shard_where = where;
    shard_where.name = actors::actor_name(job_, "shard", at);
    actors::ShardOptions shard_options{.job = job_,
                                       .at = at,
                                       .model = model_spec(config_.model),
                                       .optimizer = optimizer_spec(config_.optimizer),
                                       .precision = precision(config_),
                                       .seed = config_.training.seed};
    absl::StatusOr<ActorRef<actors::ParamShardActor>> shard =
        cluster_.spawn<actors::ParamShardActor>(shard_where, shard_options);
    if (!shard.ok()) return shard.status();
    actors_.push_back(shard->id());
    replicas_.push_back({*stage, *shard});
  }
  if (dp > 1) {
    absl::StatusOr<uint64_t> generation = declare_collective_group(cluster_, group, stage_ids);
    if (!generation.ok()) return generation.status();
  }
  // setup() joins the group: every stage must be in it at once.
  std::vector<Future<void>> joining;
  for (Replica& r : replicas_)
    joining.push_back(r.stage.call(&actors::PipelineStageActor::setup));
  for (auto& f : joining) {
    if (absl::Status s = std::move(f).get(kSetupTimeout); !s.ok()) return s;
  }
  std::vector<Future<int64_t>> initialising;
  for (Replica& r : replicas_)
    initialising.push_back(r.shard.call(&actors::ParamShardActor::init));
  for (auto& f : initialising) {
    if (absl::StatusOr<int64_t> n = std::move(f).get(kSetupTimeout); !n.ok()) return n.status();
  }
  absl::StatusOr<actors::LoaderInfo> info =
      loaders_[0].call(&actors::DataLoaderActor::info).get(kSetupTimeout);
  if (!info.ok()) return info.status();
  data_info_ = {.num_samples = info->num_samples, .steps_per_epoch = info->steps_per_epoch};

  ControllerOptions options{.schedule = config_.schedule,
                            .gradient_clipping = static_cast<float>(config_.gradient_clipping)};
  if (config_.fp16.enabled) {
    if (config_.fp16.static_loss_scale > 0) {
      options.static_loss_scale = config_.fp16.static_loss_scale;
    } else {
      options.dynamic_loss_scale = config_.fp16.dynamic;
    }
  }
  absl::StatusOr<TrainerController> controller =
      TrainerController::create(replicas_, std::move(options));
  if (!controller.ok()) return controller.status();
  controller_.emplace(*std::move(controller));
  return absl::OkStatus();
}

absl::StatusOr<actors::EvalReport> DdpTrainer::evaluate(int samples) {
  if (!config_.data.synthetic) {
    return absl::FailedPreconditionError("task accuracy needs a synthetic task (data.synthetic)");
  }
  actors::EvalRequest request{.task = {.digits = config_.data.synthetic->digits,
                                       .num_samples = config_.data.synthetic->num_samples,
                                       .seed = config_.data.synthetic->seed,
                                       .seq_len = config_.model.seq_len},
                              .samples = samples};
  return replicas_[0].stage.call(&actors::PipelineStageActor::evaluate, request).get(kSetupTimeout);
}

absl::StatusOr<std::vector<int32_t>> DdpTrainer::generate(std::vector<int32_t> prompt,
                                                          int max_new_tokens, float temperature,
                                                          uint64_t seed) {
  return replicas_[0]
      .stage
      .call(&actors::PipelineStageActor::generate, std::move(prompt), max_new_tokens, temperature,
            seed)
      .get(kSetupTimeout);
}

absl::StatusOr<std::vector<float>> DdpTrainer::master_params() {
  return replicas_[0].shard.call(&actors::ParamShardActor::master_params).get(kSetupTimeout);
}

absl::Status DdpTrainer::stop() {
  if (stopped_) return absl::OkStatus();
  stopped_ = true;
  absl::Status first;
  // Stages first (they hold the group), then shards and loaders.
  for (auto it = actors_.rbegin(); it != actors_.rend(); ++it) {
    absl::Status s = cluster_.kill(*it);
    if (!s.ok() && !absl::IsNotFound(s) && !IsActorDied(s)) first.Update(s);
  }
  if (placement_group_) first.Update(cluster_.remove_placement_group(*placement_group_));
  return first;
}

}  // namespace troupe::trainers
