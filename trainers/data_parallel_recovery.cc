// DataParallelTrainer's part of recovery (trainers/recovery.h): finding the
// ranks a lost node took with it and waiting for the head to restart their
// actors (trainers/mesh_watch.h), new actors for a rank lost while the head
// was down, and declaring the data-parallel group again.
#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/cluster/collective_group.h"
#include "trainers/data_parallel_trainer.h"

namespace troupe::trainers {

std::vector<ActorId> DataParallelTrainer::rank_actors(int d) const {
  const Replica& r = replicas_[d];
  return {r.loader.id(), r.stage.id(), r.shard.id()};
}

std::vector<actors::Coordinate> DataParallelTrainer::coordinates() const {
  std::vector<actors::Coordinate> out;
  for (int d = 0; d < static_cast<int>(replicas_.size()); ++d)
    out.push_back({.d = d, .p = 0, .t = 0});
  return out;
}

absl::StatusOr<std::vector<LostMember>> DataParallelTrainer::find_lost(absl::Time deadline) {
  return watch_.find_lost(coordinates(), deadline, config_.fault_tolerance.wait_for_node_s);
}

absl::Status DataParallelTrainer::fence(const std::vector<LostMember>& hung) {
  return watch_.fence_hung(hung);
}

absl::Status DataParallelTrainer::await_replacements(const std::vector<LostMember>& lost,
                                                     absl::Time deadline) {
  return watch_.await_replacements(
      lost, deadline,
      [this](const actors::Coordinate& at, absl::Time until) { return respawn_rank(at.d, until); },
      config_.fault_tolerance.wait_for_node_s);
}

absl::Status DataParallelTrainer::respawn_rank(int d, absl::Time deadline) {
  const actors::Coordinate at{.d = d, .p = 0, .t = 0};
  // The node the rank was on must not rejoin with the old actors (best
  // effort: the new actors' ids differ from the old ones in any case).
  watch_.fence(at, "lost while the head was down").IgnoreError();
  absl::StatusOr<cluster::PlacementGroupId> pg = cluster_.create_placement_group(
      {"CPU=1"}, cluster::PlacementStrategy::kPack,
      absl::StrCat(job_, "/replica-", d, "-", placement_groups_.size()));
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
  // (After a resize, names made from job_ and d may be a live rank's.)
  const std::string names = resized_ > 0 ? absl::StrCat(job_, "+", ++resizes_) : job_;
  absl::StatusOr<Replica> replica = spawn_replica(d, *pg, 0, names, config_);
  if (!replica.ok()) return replica.status();
  replicas_[d] = *std::move(replica);
  return controller_->replace_member(at, stage_endpoint(replicas_[d].stage),
                                     shard_endpoint(replicas_[d].shard));
}

absl::Status DataParallelTrainer::declare_groups() {
  if (replicas_.size() < 2) return absl::OkStatus();
  std::vector<ActorId> stages;
  for (const Replica& r : replicas_)
    stages.push_back(r.stage.id());
  return declare_collective_group(cluster_, job_ + "/dp", stages).status();
}

void DataParallelTrainer::mark_whole() {
  watch_.mark_whole(coordinates());
}

}  // namespace troupe::trainers
