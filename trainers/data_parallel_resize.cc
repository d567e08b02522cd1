// DataParallelTrainer's part of elasticity (docs/elasticity.md): the job
// goes on at another dp between two steps, with the same global batch.
//
//   1. plan      the new size's split of the global batch (plan_batch)
//   2. spawn     the new ranks' actors, in a placement group of their own
//   3. state     peer to peer, before anything changes: each new shard
//                takes the whole state of a kept one (a DDP replica); under
//                ZeRO every shard of the new size fetches its new
//                partition's parts from their old owners (a lost one's
//                from its buddy's replica: fetch_partitions)
//   4. group     the group is declared at the new size (declare_groups);
//                every kept stage leaves the old generation and joins the
//                new one at its new rank with its loader reshaped
//                (PipelineStageActor::resize), every new one joins it
//                (setup) and moves its loader to the committed position
//                (seek_data); under ZeRO every shard then adopts the
//                partition it fetched, into its stage's new buffers
//   5. members   the controller goes on over the new members (under ZeRO
//                each partition's replica seeded again on the next rank);
//                the ranks not kept are killed
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "actors/step_clock.h"
#include "actors/zero_partition.h"
#include "trainers/data_parallel_trainer.h"
#include "trainers/elastic_batch.h"
#include "trainers/job_device.h"
#include "trainers/mesh_layout.h"

namespace troupe::trainers {

std::vector<std::optional<uint32_t>> DataParallelTrainer::rank_nodes(
    const cluster::ClusterStatus& status) const {
  std::map<uint64_t, const cluster::ActorStatus*> by_id;
  for (const cluster::ActorStatus& a : status.actors)
    by_id[a.id] = &a;
  std::vector<std::optional<uint32_t>> nodes;
  for (const Replica& r : replicas_) {
    auto a = by_id.find(r.stage.id().value);
    nodes.push_back(a != by_id.end() && a->second->state == cluster::ActorState::kAlive
                        ? std::optional<uint32_t>(a->second->node)
                        : std::nullopt);
  }
  return nodes;
}

absl::Status DataParallelTrainer::resize(const std::vector<int>& keep,
                                         std::vector<int32_t> target_nodes, absl::Time deadline) {
  const int old_dp = static_cast<int>(replicas_.size());
  const int add = static_cast<int>(target_nodes.size());
  std::set<int> kept;
  for (int d : keep) {
    if (d < 0 || d >= old_dp || !kept.insert(d).second) {
      return absl::FailedPreconditionError(
          absl::StrCat("resize: rank ", d, " cannot be kept (dp is ", old_dp, ")"));
    }
  }
  if (keep.empty()) {
    return absl::FailedPreconditionError("resize: at least one rank must be kept");
  }
  const int new_dp = static_cast<int>(keep.size()) + add;
  if (zero_stage() >= 2 && (new_dp == 1) != (old_dp == 1)) {
    return absl::UnimplementedError(
        absl::StrCat("resizing a ZeRO-", zero_stage(), " job from dp ", old_dp, " to dp ", new_dp,
                     " is not implemented: at dp 1 the model holds what ZeRO partitions"));
  }
  // (Planned from the batch keys the job started with: a micro-batch made
  // smaller at one size may grow back at another.)
  absl::StatusOr<BatchSplit> split = plan_batch(configured_, new_dp);
  if (!split.ok()) return split.status();
  const ControllerState committed = controller_->state();
  auto left = [deadline] { return std::max(deadline - absl::Now(), absl::ZeroDuration()); };

  ResizeTimes times;
  double mark = actors::now_ms();
  auto lap = [&mark] {
    const double now = actors::now_ms();
    return now - std::exchange(mark, now);
  };
  // 2. The new ranks, named apart from the old ones. Until the group is
  // formed at the new size (4), an error leaves the job as it was: what was
  // spawned for it is removed again.
  const TrainConfig resized = with_split(config_, *split);
  std::vector<Replica> added;
  // A group per new rank, on its target node where it has room (so that one
  // leaving later gives its bundle back).
  std::vector<cluster::PlacementGroupId> groups;
  // (Removing a group kills the actors spawned in it.)
  auto undo = [&](const absl::Status& why) {
    for (cluster::PlacementGroupId pg : groups)
      cluster_.remove_placement_group(pg).IgnoreError();
    for (Replica& r : added) {
      std::erase_if(actors_, [&](ActorId id) {
        return id == r.loader.id() || id == r.stage.id() || id == r.shard.id();
      });
    }
    return why;
  };
  if (add > 0) {
    const std::string names = absl::StrCat(job_, "+", ++resizes_);
    for (int i = 0; i < add; ++i) {
      absl::StatusOr<cluster::PlacementGroupId> pg = cluster_.create_placement_group(
          {stage_resources(config_)}, cluster::PlacementStrategy::kSpread,
          absl::StrCat(names, "/rank-", i),
          /*detached=*/false, {target_nodes[i]});
      if (!pg.ok()) return undo(pg.status());
      groups.push_back(*pg);
    }
    for (cluster::PlacementGroupId pg : groups) {
      if (absl::Status s = cluster_.wait_placement_group(pg, left()); !s.ok()) {
        return undo(absl::ResourceExhaustedError(absl::StrCat(
            "resize to dp ", new_dp, ": no room for ", add, add == 1 ? " new rank" : " new ranks",
            " (", stage_needs(config_, 1), " each): ", s.message())));
      }
    }
    for (int i = 0; i < add; ++i) {
      absl::StatusOr<Replica> replica =
          spawn_replica(static_cast<int>(keep.size()) + i, groups[i], 0, names, resized);
      if (!replica.ok()) return undo(replica.status());
      added.push_back(*std::move(replica));
    }
  }
  times.spawn_ms = lap();
  std::vector<Replica> next;
  for (int d : keep)
    next.push_back(replicas_[d]);
  for (Replica& r : added)
    next.push_back(r);
  // 3. The committed state, peer to peer: a DDP replica's whole from the
  // first rank kept; under ZeRO each new partition's parts from their old
  // owners (a lost one's from its buddy's replica), set aside until the
  // group is formed (adopted in 4).
  if (zero_stage() > 0) {
    std::set<int> lost;
    if (static_cast<int>(keep.size()) < old_dp) {
      absl::StatusOr<cluster::ClusterStatus> status = cluster_.status();
      if (!status.ok()) return undo(status.status());
      const std::vector<std::optional<uint32_t>> nodes = rank_nodes(*status);
      for (int d = 0; d < old_dp; ++d) {
        if (!kept.contains(d) && !nodes[d].has_value()) lost.insert(d);
      }
    }
    if (absl::Status s = fetch_partitions(next, lost, left()); !s.ok()) return undo(s);
  } else {
    std::vector<Future<actors::ShardRestoreReport>> restoring;
    for (Replica& r : added)
      restoring.push_back(
          r.shard.call(&actors::ParamShardActor::restore_from, replicas_[keep[0]].shard));
    if (absl::Status s = when_all(std::move(restoring)).get(left()).status(); !s.ok()) {
      return undo(s);
    }
  }
  placement_groups_.insert(placement_groups_.end(), groups.begin(), groups.end());

  times.state_ms = lap();
  // 4. The group at the new size. From here the old group is left: an error
  // leaves the job unusable (Internal).
  auto broken = [new_dp](const absl::Status& s) {
    return absl::InternalError(
        absl::StrCat("resize to dp ", new_dp, " failed once the group was left: ", s.message()));
  };
  std::vector<ActorId> leaving;
  for (int d = 0; d < old_dp; ++d) {
    if (kept.contains(d)) continue;
    for (ActorId id : rank_actors(d))
      leaving.push_back(id);
  }
  replicas_ = std::move(next);
  config_ = resized;
  if (absl::Status s = declare_groups(); !s.ok()) return broken(s);
  std::vector<Future<void>> joining;
  for (int rank = 0; rank < new_dp; ++rank) {
    const actors::StageShape shape{.dp = new_dp,
                                   .rank = rank,
                                   .micro_batch = static_cast<int>(split->micro_batch),
                                   .grad_accum = static_cast<int>(split->grad_accum),
                                   .position = committed.data_position};
    joining.push_back(rank < static_cast<int>(keep.size())
                          ? replicas_[rank].stage.call(&actors::PipelineStageActor::resize, shape)
                          : replicas_[rank].stage.call(&actors::PipelineStageActor::setup));
  }
  if (absl::Status s = when_all(std::move(joining)).get(left()); !s.ok()) return broken(s);
  std::vector<Future<int64_t>> seeking;
  for (Replica& r : added) {
    seeking.push_back(r.stage.call(&actors::PipelineStageActor::seek_data, committed.data_position,
                                   data_info_.samples_per_epoch));
  }
  if (absl::Status s = when_all(std::move(seeking)).get(left()).status(); !s.ok()) {
    return broken(s);
  }
  if (zero_stage() > 0) {
    // Every stage holds its new partition's buffers: the shards fill them.
    std::vector<Future<actors::ShardRestoreReport>> adopting;
    for (Replica& r : replicas_)
      adopting.push_back(r.shard.call(&actors::ParamShardActor::adopt_partition));
    if (absl::Status s = when_all(std::move(adopting)).get(left()).status(); !s.ok()) {
      return broken(s);
    }
  }

  times.group_ms = lap();
  // 5. The controller's members, and the ranks that leave.
  if (absl::Status s = controller_->resize({.dp = new_dp, .pp = 1, .tp = 1}, members()); !s.ok()) {
    return broken(s);
  }
  if (keeps_replicas(config_, new_dp)) {
    // Every partition's replica, seeded afresh on the rank after it.
    if (absl::Status s = controller_->connect_buddies(); !s.ok()) return broken(s);
  }
  for (ActorId id : leaving)
    cluster_.kill(id).IgnoreError();  // (as stop(): one already gone is fine)
  // A placement group none of whose ranks is left gives its bundles back.
  std::erase_if(placement_groups_, [&](cluster::PlacementGroupId pg) {
    const bool used = std::any_of(replicas_.begin(), replicas_.end(),
                                  [&](const Replica& r) { return r.group == pg; });
    if (!used) cluster_.remove_placement_group(pg).IgnoreError();
    return !used;
  });
  ++resized_;
  last_resize_ = times;
  // Recovery compares with where the actors run now.
  if (config_.fault_tolerance.enabled) mark_whole();
  return absl::OkStatus();
}

std::optional<actors::StageShape> DataParallelTrainer::shape_of(const actors::Coordinate& at,
                                                                int64_t position) const {
  if (resized_ == 0) return std::nullopt;  // every actor runs as it was spawned
  return actors::StageShape{.dp = config_.parallel.dp,
                            .rank = at.d,
                            .micro_batch = static_cast<int>(config_.micro_batch_size),
                            .grad_accum = static_cast<int>(config_.gradient_accumulation_steps),
                            .position = position};
}

absl::Status DataParallelTrainer::fetch_partitions(const std::vector<Replica>& next,
                                                   const std::set<int>& lost,
                                                   absl::Duration timeout) {
  const nn::ParamRange whole{0, nn::model_layout(config_.model).num_params()};
  const int old_dp = static_cast<int>(replicas_.size());
  const int new_dp = static_cast<int>(next.size());
  const int64_t committed = controller_->state().next_step - 1;
  // Where old rank d's state is read: its own shard, or if it was lost the
  // replica its buddy keeps.
  struct Source {
    int shard;
    bool replica;
  };
  std::vector<Source> from(old_dp);
  for (int d = 0; d < old_dp; ++d) {
    from[d] = {d, false};
    if (!lost.contains(d)) continue;
    const int buddy = buddy_of(config_, {.dp = old_dp, .pp = 1, .tp = 1}, {.d = d, .p = 0, .t = 0});
    if (buddy < 0 || lost.contains(buddy)) {
      return absl::FailedPreconditionError(
          absl::StrCat("rank ", d, " was lost with its partition",
                       buddy < 0 ? std::string(" (the job keeps no replicas)")
                                 : absl::StrCat(" and the rank keeping its replica, ", buddy)));
    }
    from[d] = {buddy, true};
  }
  std::vector<Future<void>> fetching;
  for (int rank = 0; rank < new_dp; ++rank) {
    const nn::ParamRange range = actors::ZeroPartition(whole, new_dp, rank).own();
    std::vector<ActorRef<actors::ParamShardActor>> sources;
    std::vector<actors::PartitionPart> parts;
    for (int d = 0; d < old_dp; ++d) {
      const nn::ParamRange old = actors::ZeroPartition(whole, old_dp, d).own();
      const nn::ParamRange part{std::max(old.begin, range.begin), std::min(old.end, range.end)};
      if (part.begin < part.end) {
        sources.push_back(replicas_[from[d].shard].shard);
        parts.push_back(
            {.range = part, .from_replica = from[d].replica, .replica_step = committed});
      }
    }
    for (int d = 0; d < old_dp && sources.empty(); ++d) {
      // An empty partition still takes the step: an empty part, of a shard
      // whose range reaches its place.
      const nn::ParamRange old = actors::ZeroPartition(whole, old_dp, d).own();
      if (old.begin <= range.begin && range.begin <= old.end) {
        sources.push_back(replicas_[from[d].shard].shard);
        parts.push_back({.range = {range.begin, range.begin},
                         .from_replica = from[d].replica,
                         .replica_step = committed});
      }
    }
    fetching.push_back(next[rank].shard.call(&actors::ParamShardActor::fetch_partition, range,
                                             std::move(sources), std::move(parts)));
  }
  return when_all(std::move(fetching)).get(timeout);
}

}  // namespace troupe::trainers
