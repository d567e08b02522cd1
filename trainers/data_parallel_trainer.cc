#include "trainers/data_parallel_trainer.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "actors/mesh.h"
#include "actors/zero_partition.h"
#include "trainers/member_spawn.h"

namespace troupe::trainers {
namespace {

constexpr absl::Duration kSetupTimeout = absl::Seconds(120);

}  // namespace

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
  if (config.fault_tolerance.enabled) trainer->mark_whole();  // where each actor runs
  return trainer;
}

DataParallelTrainer::~DataParallelTrainer() {
  stop().IgnoreError();
}

std::string DataParallelTrainer::describe() const {
  const int dp = config_.parallel.dp;
  if (zero_stage() == 0) return absl::StrCat("DDP over ", dp, dp == 1 ? " replica" : " replicas");
  return absl::StrCat("ZeRO-", zero_stage(), " over ", dp, dp == 1 ? " rank" : " ranks");
}

absl::StatusOr<DataParallelTrainer::Replica> DataParallelTrainer::spawn_replica(
    int d, cluster::PlacementGroupId group, int bundle, const std::string& names,
    const TrainConfig& config) {
  SpawnOptions where;
  where.placement_group = group.value;
  where.bundle_index = bundle;
  // With fault tolerance the head restarts a lost rank's actors in its
  // bundle, placed again elsewhere (trainers/recovery.h).
  if (config.fault_tolerance.enabled) where.max_restarts = config.fault_tolerance.max_failures;
  // DDP: the whole stage; ZeRO: this rank's partition of it.
  const nn::ParamRange whole{0, nn::model_layout(config.model).num_params()};
  const MemberPlace place{
      .at = {.d = d, .p = 0, .t = 0},
      .mesh = {.dp = config.parallel.dp, .pp = 1, .tp = 1},
      .names = names,
      .where = where,
      .threads = threads_,
      .dp_group = job_ + "/dp",
      .pipe_group = "",
      .shard_range =
          zero_stage() == 0 ? whole : actors::ZeroPartition(whole, config.parallel.dp, d).own()};
  absl::StatusOr<MemberActors> actors = spawn_member(cluster_, config, place, &actors_);
  if (!actors.ok()) return actors.status();
  return Replica{
      .stage = actors->stage, .shard = actors->shard, .loader = actors->loader, .group = group};
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
        {"CPU=1"}, cluster::PlacementStrategy::kSpread, absl::StrCat(job_, "/rank-", d),
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
  std::vector<std::string> bundles(dp, "CPU=1");
  auto placing = [&](const absl::Status& s) {
    return absl::Status(s.code(), absl::StrCat("parallel.dp ", dp, ": placing ", dp,
                                               " replicas (one CPU each): ", s.message()));
  };
  absl::StatusOr<cluster::PlacementGroupId> pg = cluster_.create_placement_group(
      bundles, cluster::PlacementStrategy::kSpread, job_ + "/replicas");
  if (!pg.ok()) return placing(pg.status());
  placement_groups_.push_back(*pg);
  if (absl::Status s = cluster_.wait_placement_group(*pg, kSetupTimeout); !s.ok()) {
    return placing(s);
  }
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
  if (absl::Status s = declare_groups(); !s.ok()) return s;
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
      replicas_[0].loader.call(&actors::DataLoaderActor::info).get(kSetupTimeout);
  if (!info.ok()) return info.status();
  data_info_ = {.num_samples = info->num_samples,
                .steps_per_epoch = info->steps_per_epoch,
                .samples_per_epoch = info->samples_per_epoch};

  ControllerOptions options = controller_options(config_);
  if (config_.fault_tolerance.enabled) {
    options.member_lost = [this](const actors::Coordinate& at) { return watch_.member_lost(at); };
  }
  absl::StatusOr<TrainerController> controller =
      TrainerController::create({.dp = dp, .pp = 1, .tp = 1}, members(), std::move(options));
  if (!controller.ok()) return controller.status();
  controller_.emplace(*std::move(controller));
  return controller_->connect_buddies();
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

std::vector<MeshMember> DataParallelTrainer::members() const {
  const int dp = static_cast<int>(replicas_.size());
  const nn::ParamRange whole{0, nn::model_layout(config_.model).num_params()};
  std::vector<MeshMember> out;
  for (int d = 0; d < dp; ++d) {
    out.push_back({.at = {.d = d, .p = 0, .t = 0},
                   .stage = stage_endpoint(replicas_[d].stage),
                   .shard = shard_endpoint(replicas_[d].shard),
                   .range = zero_stage() == 0 ? whole : actors::ZeroPartition(whole, dp, d).own(),
                   .buddy = buddy_of(d, dp)});
  }
  return out;
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

absl::Status DataParallelTrainer::stop() {
  if (stopped_) return absl::OkStatus();
  stopped_ = true;
  return stop_job(cluster_, actors_, placement_groups_);
}

}  // namespace troupe::trainers
