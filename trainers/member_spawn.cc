#include "trainers/member_spawn.h"

#include "core/status.h"
#include "trainers/job_device.h"
#include "trainers/trainer.h"

namespace troupe::trainers {

actors::StageOptions stage_options(const TrainConfig& config, const MemberPlace& place) {
  const int zero = config.zero.stage;
  return {.job = place.names,
          .at = place.at,
          .mesh = place.mesh,
          .model = config.model,
          .model_options = config.model_options,
          .micro_batch = static_cast<int>(config.micro_batch_size),
          .grad_accum = static_cast<int>(config.gradient_accumulation_steps),
          .gradient_sync = actors::gradient_sync_of_stage(zero),
          .bucket_elements = config.zero.reduce_bucket_size,
          .overlap_comm = config.zero.overlap_comm,
          .prefetch_elements = config.zero.stage3_prefetch_bucket_size,
          .persistence_threshold = config.zero.stage3_param_persistence_threshold,
          .max_live_parameters = config.zero.stage3_max_live_parameters,
          .threads = place.threads,
          .group = place.dp_group,
          .precision = compute_precision(config),
          .schedule = config.parallel.schedule,
          .virtual_stages = config.parallel.virtual_stages,
          .partition = config.parallel.partition,
          .pipe_group = place.pipe_group,
          .tp_group = place.tp_group,
          .device = job_device(config)};
}

absl::StatusOr<MemberActors> spawn_member(Cluster& cluster, const TrainConfig& config,
                                          const MemberPlace& place, std::vector<ActorId>* spawned) {
  MemberActors out;
  SpawnOptions loader_where = place.where;
  loader_where.resources = "";
  loader_where.name = actors::actor_name(place.names, "loader", place.at);
  actors::LoaderOptions loader_options_at = loader_options(config, place.names, place.at.d);
  loader_options_at.stage = place.at.p;
  loader_options_at.slice = place.at.t;
  absl::StatusOr<ActorRef<actors::DataLoaderActor>> loader =
      cluster.spawn<actors::DataLoaderActor>(loader_where, loader_options_at);
  if (!loader.ok()) return loader.status();
  spawned->push_back(loader->id());
  out.loader = *loader;

  SpawnOptions stage_where = place.where;
  stage_where.name = actors::actor_name(place.names, "stage", place.at);
  stage_where.resources = place.stage_resources;
  stage_where.dedicated_thread = true;
  absl::StatusOr<ActorRef<actors::PipelineStageActor>> stage =
      cluster.spawn<actors::PipelineStageActor>(stage_where, stage_options(config, place));
  if (!stage.ok()) return stage.status();
  spawned->push_back(stage->id());
  out.stage = *stage;

  SpawnOptions shard_where = place.where;
  shard_where.resources = "";
  shard_where.name = actors::actor_name(place.names, "shard", place.at);
  const actors::ShardOptions shard_options{.job = place.names,
                                           .at = place.at,
                                           .model = config.model,
                                           .range = place.shard_range,
                                           .optimizer = optimizer_spec(config.optimizer),
                                           .precision = compute_precision(config),
                                           .seed = config.training.seed,
                                           .tp = place.mesh.tp,
                                           .init_from = config.training.init_from};
  absl::StatusOr<ActorRef<actors::ParamShardActor>> shard =
      cluster.spawn<actors::ParamShardActor>(shard_where, shard_options);
  if (!shard.ok()) return shard.status();
  spawned->push_back(shard->id());
  out.shard = *shard;
  return out;
}

absl::StatusOr<std::vector<float>> gather_masters(
    const std::vector<ActorRef<actors::ParamShardActor>>& shards, absl::Duration timeout) {
  std::vector<Future<std::vector<float>>> parts;
  for (const ActorRef<actors::ParamShardActor>& shard : shards)
    parts.push_back(shard.call(&actors::ParamShardActor::master_params));
  std::vector<float> whole;
  for (auto& f : parts) {
    absl::StatusOr<std::vector<float>> part = std::move(f).get(timeout);
    if (!part.ok()) return part.status();
    whole.insert(whole.end(), part->begin(), part->end());
  }
  return whole;
}

absl::Status stop_job(Cluster& cluster, const std::vector<ActorId>& actors,
                      const std::vector<cluster::PlacementGroupId>& placement_groups) {
  absl::Status first;
  for (auto it = actors.rbegin(); it != actors.rend(); ++it) {
    absl::Status s = cluster.kill(*it);
    if (!s.ok() && !absl::IsNotFound(s) && !IsActorDied(s)) first.Update(s);
  }
  for (cluster::PlacementGroupId pg : placement_groups) {
    // (A restarted head knows none of the groups its earlier start placed.)
    absl::Status s = cluster.remove_placement_group(pg);
    if (!s.ok() && !absl::IsNotFound(s)) first.Update(s);
  }
  return first;
}

}  // namespace troupe::trainers
