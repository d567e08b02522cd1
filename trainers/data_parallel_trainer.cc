#include "trainers/data_parallel_trainer.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "actors/mesh.h"
#include "trainers/job_device.h"
#include "trainers/mesh_layout.h"

namespace troupe::trainers {

absl::StatusOr<std::unique_ptr<DataParallelTrainer>> DataParallelTrainer::start(
    Cluster& cluster, const TrainConfig& config, const std::string& job, int threads) {
  if (config.zero.stage < 0 || config.zero.stage > 3 || config.parallel.pp != 1 ||
      config.parallel.tp != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the data-parallel trainer runs zero_optimization.stage 0-3 with pp = tp = 1 (asked: "
        "stage ",
        config.zero.stage, ", pp ", config.parallel.pp, ", tp ", config.parallel.tp, ")"));
  }
  std::unique_ptr<DataParallelTrainer> trainer(
      new DataParallelTrainer(cluster, config, job, threads));
  if (absl::Status s = trainer->spawn_replicas(); !s.ok()) {
    trainer->stop().IgnoreError();
    return s;
  }
  return trainer;
}

std::string DataParallelTrainer::describe() const {
  const int dp = config_.parallel.dp;
  if (zero_stage() == 0) return absl::StrCat("DDP over ", dp, dp == 1 ? " replica" : " replicas");
  return absl::StrCat("ZeRO-", zero_stage(), " over ", dp, dp == 1 ? " rank" : " ranks");
}

absl::StatusOr<DataParallelTrainer::Replica> DataParallelTrainer::spawn_replica(
    int d, cluster::PlacementGroupId group, int bundle, const std::string& names,
    const TrainConfig& config) {
  const MemberPlace place =
      member_place({.d = d, .p = 0, .t = 0}, {.dp = config.parallel.dp, .pp = 1, .tp = 1}, group,
                   bundle, names, config);
  absl::StatusOr<MemberActors> actors = spawn_member(cluster_, config, place, &actors_);
  if (!actors.ok()) return actors.status();
  return Replica{*std::move(actors), group};
}

nn::ParamRange DataParallelTrainer::stage_params(int p) const {
  (void)p;  // the one stage holds the whole model
  return {0, nn::model_layout(config_.model).num_params()};
}

absl::StatusOr<std::vector<cluster::PlacementGroupId>> DataParallelTrainer::rank_groups(
    cluster::PlacementGroupId spread) {
  absl::StatusOr<cluster::ClusterStatus> status = cluster_.status();
  if (!status.ok()) return status.status();
  std::vector<int32_t> nodes;
  for (const cluster::PlacementGroupStatus& g : status->placement_groups) {
    if (g.id == spread.value) nodes.assign(g.bundle_nodes.begin(), g.bundle_nodes.end());
  }
  const int dp = config_.parallel.dp;
  nodes.resize(dp, -1);
  // The spread's reservations go back first, for the ranks' own to take.
  if (absl::Status s = cluster_.remove_placement_group(spread); !s.ok()) return s;
  placement_groups_.clear();
  std::vector<cluster::PlacementGroupId> groups;
  for (int d = 0; d < dp; ++d) {
    absl::StatusOr<cluster::PlacementGroupId> pg = cluster_.create_placement_group(
        {stage_resources(config_)}, cluster::PlacementStrategy::kSpread,
        absl::StrCat(job_, "/rank-", d),
        /*detached=*/false, {nodes[d]});
    if (!pg.ok()) return pg.status();
    placement_groups_.push_back(*pg);
    if (absl::Status s = cluster_.wait_placement_group(*pg, kSetupTimeout); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("placing rank ", d, ": ", s.message()));
    }
    groups.push_back(*pg);
  }
  return groups;
}

absl::Status DataParallelTrainer::spawn_replicas() {
  const int dp = config_.parallel.dp;
  // One bundle per replica, on different nodes where there are enough.
  // A dp the cluster cannot hold is named by its config key.
  std::vector<std::string> bundles(dp, stage_resources(config_));
  auto placing = [&](const absl::Status& s) {
    return absl::Status(s.code(), absl::StrCat("parallel.dp ", dp, ": placing ", dp, " replicas (",
                                               stage_needs(config_, 1), " each): ", s.message()));
  };
  absl::StatusOr<cluster::PlacementGroupId> pg = place_spread(bundles, job_ + "/replicas");
  if (!pg.ok()) return placing(pg.status());
  // An elastic job's ranks come and go one by one: each gets a group of its
  // own, on the node the spread placed it on, so that one leaving gives its
  // bundle back (a bundle left in a shared group would be placed again).
  std::vector<cluster::PlacementGroupId> groups(dp, *pg);
  std::vector<int> bundles_of(dp);
  for (int d = 0; d < dp; ++d)
    bundles_of[d] = d;
  if (config_.elasticity.enabled) {
    absl::StatusOr<std::vector<cluster::PlacementGroupId>> own = rank_groups(*pg);
    if (!own.ok()) return own.status();
    groups = *std::move(own);
    std::fill(bundles_of.begin(), bundles_of.end(), 0);
  }
  for (int d = 0; d < dp; ++d) {
    absl::StatusOr<Replica> replica = spawn_replica(d, groups[d], bundles_of[d], job_, config_);
    if (!replica.ok()) return replica.status();
    replicas_.push_back(*std::move(replica));
  }
  return form_mesh();
}

absl::Status DataParallelTrainer::gather_parameters() {
  if (zero_stage() == 0) return absl::OkStatus();
  std::vector<Future<void>> gathering;
  for (Replica& r : replicas_)
    gathering.push_back(r.stage.call(&actors::PipelineStageActor::gather_parameters));
  absl::Status first;
  for (auto& f : gathering)
    first.Update(std::move(f).get(kSetupTimeout));
  return first;
}

absl::StatusOr<actors::EvalReport> DataParallelTrainer::evaluate(int samples) {
  absl::StatusOr<actors::EvalRequest> request = eval_request(config_, samples);
  if (!request.ok()) return request.status();
  if (absl::Status s = gather_parameters(); !s.ok()) return s;
  return replicas_[0]
      .stage.call(&actors::PipelineStageActor::evaluate, *std::move(request))
      .get(kSetupTimeout);
}

absl::StatusOr<actors::ValidationResult> DataParallelTrainer::validate() {
  absl::StatusOr<actors::TokenDataset> data = validation_dataset(config_);
  if (!data.ok()) return data.status();
  if (absl::Status s = gather_parameters(); !s.ok()) return s;
  // Every replica scores its share of the windows at once.
  const int world = static_cast<int>(replicas_.size());
  std::vector<Future<actors::ValidationPart>> parts;
  for (int d = 0; d < world; ++d) {
    parts.push_back(replicas_[d].stage.call(&actors::PipelineStageActor::validate,
                                            validation_request(config_, d, world)));
  }
  std::vector<actors::ValidationPart> got;
  absl::Status first;
  for (auto& f : parts) {
    absl::StatusOr<actors::ValidationPart> part = std::move(f).get(kSetupTimeout);
    if (part.ok()) {
      got.push_back(*part);
    } else {
      first.Update(part.status());
    }
  }
  if (!first.ok()) return first;
  return actors::combine(got, data->header());
}

absl::StatusOr<std::vector<int32_t>> DataParallelTrainer::generate(std::vector<int32_t> prompt,
                                                                   int max_new_tokens,
                                                                   float temperature,
                                                                   uint64_t seed) {
  if (absl::Status s = gather_parameters(); !s.ok()) return s;
  return replicas_[0]
      .stage
      .call(&actors::PipelineStageActor::generate, std::move(prompt), max_new_tokens, temperature,
            seed)
      .get(kSetupTimeout);
}

absl::StatusOr<std::vector<float>> DataParallelTrainer::master_params() {
  if (zero_stage() == 0) {
    return replicas_[0].shard.call(&actors::ParamShardActor::master_params).get(kSetupTimeout);
  }
  // The partitions, in rank order, tile the model.
  std::vector<ActorRef<actors::ParamShardActor>> shards;
  for (const Replica& r : replicas_)
    shards.push_back(r.shard);
  return gather_masters(shards, kSetupTimeout);
}

absl::StatusOr<MemberActors> DataParallelTrainer::spawn_replacement(const actors::Coordinate& at,
                                                                    cluster::PlacementGroupId pg) {
  // (After a resize, names made from job_ and d may be a live rank's.)
  const std::string names = resized_ > 0 ? absl::StrCat(job_, "+", ++resizes_) : job_;
  absl::StatusOr<Replica> replica = spawn_replica(at.d, pg, 0, names, config_);
  if (!replica.ok()) return replica.status();
  replicas_[at.d] = *std::move(replica);
  return replicas_[at.d];
}

std::string DataParallelTrainer::replacement_group(const actors::Coordinate& at) const {
  return absl::StrCat(job_, "/replica-", at.d);
}

}  // namespace troupe::trainers
