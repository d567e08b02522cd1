#include "trainers/mesh_trainer.h"
#include "trainers/job_device.h"

#include <algorithm>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/cluster/collective_group.h"
#include "trainers/mesh_layout.h"

namespace troupe::trainers {
namespace {

// Waits for every future, returning the first error - the first that is not
// a timeout if there is one: a member that failed leaves the others of its
// groups waiting for it, and its error is the cause. All within `timeout`.
template <class T>
absl::Status wait_all(std::vector<Future<T>>& pending, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::Status first, cause;
  for (Future<T>& f : pending) {
    absl::Status s;
    if constexpr (std::is_void_v<T>) {
      s = std::move(f).get_until(deadline);
    } else {
      s = std::move(f).get_until(deadline).status();
    }
    first.Update(s);
    if (!absl::IsDeadlineExceeded(s)) cause.Update(s);
  }
  return cause.ok() ? first : cause;
}

}  // namespace

MeshTrainer::~MeshTrainer() {
  stop().IgnoreError();
}

absl::Status MeshTrainer::stop() {
  if (stopped_) return absl::OkStatus();
  stopped_ = true;
  return stop_job(cluster_, actors_, placement_groups_);
}

absl::StatusOr<cluster::PlacementGroupId> MeshTrainer::place_spread(
    const std::vector<std::string>& bundles, const std::string& name) {
  absl::StatusOr<cluster::PlacementGroupId> pg =
      cluster_.create_placement_group(bundles, cluster::PlacementStrategy::kSpread, name);
  if (!pg.ok()) return pg.status();
  placement_groups_.push_back(*pg);
  if (absl::Status s = cluster_.wait_placement_group(*pg, kSetupTimeout); !s.ok()) return s;
  return pg;
}

MemberPlace MeshTrainer::member_place(const actors::Coordinate& at, const actors::Mesh& mesh,
                                      cluster::PlacementGroupId pg, int bundle,
                                      const std::string& names, const TrainConfig& config) const {
  SpawnOptions where;
  where.placement_group = pg.value;
  where.bundle_index = bundle;
  // With fault tolerance the head restarts a lost coordinate's actors in
  // their bundle, placed again elsewhere (trainers/recovery.h).
  if (config.fault_tolerance.enabled) where.max_restarts = config.fault_tolerance.max_failures;
  return {.at = at,
          .mesh = mesh,
          .stage_resources = stage_resources(config),
          .names = names,
          .where = where,
          .threads = threads_,
          .dp_group = dp_group(job_, mesh, at.p, at.t),
          .pipe_group = pipe_group(job_, at.d, at.t),
          .tp_group = tp_group(job_, at.d, at.p),
          .shard_range = shard_range(stage_params(at.p), config.zero.stage, mesh.dp, at.d)};
}

std::vector<actors::Coordinate> MeshTrainer::coordinates() const {
  const actors::Mesh m = mesh();
  std::vector<actors::Coordinate> out;
  for (int d = 0; d < m.dp; ++d) {
    for (int p = 0; p < m.pp; ++p) {
      for (int t = 0; t < m.tp; ++t)
        out.push_back({.d = d, .p = p, .t = t});
    }
  }
  return out;
}

std::vector<ActorId> MeshTrainer::actors_at(const actors::Coordinate& at) const {
  const MemberActors& m = member_at(at);
  return {m.loader.id(), m.stage.id(), m.shard.id()};
}

nn::ParamRange MeshTrainer::owned(const actors::Coordinate& at) const {
  return shard_range(stage_params(at.p), config_.zero.stage, mesh().dp, at.d);
}

std::vector<MeshMember> MeshTrainer::members() const {
  const actors::Mesh mesh = this->mesh();
  std::vector<MeshMember> out;
  for (const actors::Coordinate& at : coordinates()) {
    const MemberActors& m = member_at(at);
    out.push_back({.at = at,
                   .stage = stage_endpoint(m.stage),
                   .shard = shard_endpoint(m.shard),
                   .range = owned(at),
                   .buddy = buddy_of(config_, mesh, at)});
  }
  return out;
}

absl::Status MeshTrainer::declare_groups() {
  const actors::Mesh mesh = this->mesh();
  auto declare = [&](const std::string& name, auto&& coordinate_of, int n) -> absl::Status {
    if (n == 1) return absl::OkStatus();  // a stage alone needs no group
    std::vector<ActorId> stages;
    for (int i = 0; i < n; ++i)
      stages.push_back(member_at(coordinate_of(i)).stage.id());
    return declare_collective_group(cluster_, name, stages).status();
  };
  absl::Status s;
  for (int p = 0; p < mesh.pp; ++p) {
    for (int t = 0; t < mesh.tp; ++t)
      s.Update(declare(
          dp_group(job_, mesh, p, t),
          [&](int i) { return actors::Coordinate{.d = i, .p = p, .t = t}; }, mesh.dp));
  }
  for (int d = 0; d < mesh.dp; ++d) {
    for (int t = 0; t < mesh.tp; ++t)
      s.Update(declare(
          pipe_group(job_, d, t), [&](int i) { return actors::Coordinate{.d = d, .p = i, .t = t}; },
          mesh.pp));
    for (int p = 0; p < mesh.pp; ++p)
      s.Update(declare(
          tp_group(job_, d, p), [&](int i) { return actors::Coordinate{.d = d, .p = p, .t = i}; },
          mesh.tp));
  }
  return s;
}

absl::Status MeshTrainer::form_mesh() {
  if (absl::Status s = declare_groups(); !s.ok()) return s;
  // setup() joins them: every stage at once.
  const std::vector<actors::Coordinate> mesh = coordinates();
  std::vector<Future<void>> joining;
  for (const actors::Coordinate& at : mesh)
    joining.push_back(member_at(at).stage.call(&actors::PipelineStageActor::setup));
  if (absl::Status s = wait_all(joining, kSetupTimeout); !s.ok()) return s;
  std::vector<Future<int64_t>> initialising;
  for (const actors::Coordinate& at : mesh)
    initialising.push_back(member_at(at).shard.call(&actors::ParamShardActor::init));
  if (absl::Status s = wait_all(initialising, kSetupTimeout); !s.ok()) return s;
  absl::StatusOr<actors::LoaderInfo> info =
      member_at(mesh[0]).loader.call(&actors::DataLoaderActor::info).get(kSetupTimeout);
  if (!info.ok()) return info.status();
  data_info_ = {.num_samples = info->num_samples,
                .steps_per_epoch = info->steps_per_epoch,
                .samples_per_epoch = info->samples_per_epoch};

  ControllerOptions options = controller_options(config_);
  if (config_.fault_tolerance.enabled) {
    options.member_lost = [this](const actors::Coordinate& at) { return watch_.member_lost(at); };
  }
  absl::StatusOr<TrainerController> controller =
      TrainerController::create(this->mesh(), members(), std::move(options));
  if (!controller.ok()) return controller.status();
  controller_.emplace(*std::move(controller));
  if (config_.fault_tolerance.enabled) mark_whole();  // where each actor runs
  return controller_->connect_buddies();
}

absl::StatusOr<std::vector<LostMember>> MeshTrainer::find_lost(absl::Time deadline) {
  return watch_.find_lost(coordinates(), deadline, config_.fault_tolerance.wait_for_node_s);
}

absl::Status MeshTrainer::fence(const std::vector<LostMember>& hung) {
  return watch_.fence_hung(hung);
}

absl::Status MeshTrainer::await_replacements(const std::vector<LostMember>& lost,
                                             absl::Time deadline) {
  return watch_.await_replacements(
      lost, deadline,
      [this](const actors::Coordinate& at, absl::Time until) { return respawn(at, until); },
      config_.fault_tolerance.wait_for_node_s);
}

void MeshTrainer::mark_whole() {
  watch_.mark_whole(coordinates());
}

absl::Status MeshTrainer::respawn(const actors::Coordinate& at, absl::Time deadline) {
  // The node it was on must not rejoin with the old actors (best effort:
  // the new actors' ids differ from the old ones in any case).
  watch_.fence(at, "lost while the head was down").IgnoreError();
  absl::StatusOr<cluster::PlacementGroupId> pg = cluster_.create_placement_group(
      {stage_resources(config_)}, cluster::PlacementStrategy::kPack,
      absl::StrCat(replacement_group(at), "-", placement_groups_.size()));
  if (!pg.ok()) return pg.status();
  placement_groups_.push_back(*pg);
  absl::Status placed =
      cluster_.wait_placement_group(*pg, std::max(deadline - absl::Now(), absl::ZeroDuration()));
  if (!placed.ok()) {
    return no_node_for(
        {actors::to_string(at)},
        absl::StrCat("its actors were lost while the head was down: ", placed.message()),
        config_.fault_tolerance.wait_for_node_s);
  }
  absl::StatusOr<MemberActors> m = spawn_replacement(at, *pg);
  if (!m.ok()) return m.status();
  return controller_->replace_member(at, stage_endpoint(m->stage), shard_endpoint(m->shard));
}

}  // namespace troupe::trainers
