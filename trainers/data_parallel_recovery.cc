// DataParallelTrainer's part of recovery (trainers/recovery.h): finding the
// ranks a lost node took with it, waiting for the head to restart their
// actors, and declaring the data-parallel group again.
#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/cluster/collective_group.h"
#include "trainers/data_parallel_trainer.h"

namespace troupe::trainers {
namespace {

constexpr absl::Duration kPoll = absl::Milliseconds(20);
constexpr absl::Duration kHeadPoll = absl::Milliseconds(100);

// The head does not answer (stopped, restarting), as opposed to refusing.
bool head_away(const absl::Status& s) {
  return absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s);
}

// The head's actors by id; while the head does not answer, asked again
// until `deadline`.
absl::StatusOr<HeadView> head_view(Cluster& cluster, absl::Time deadline) {
  for (;;) {
    absl::StatusOr<cluster::ClusterStatus> status = cluster.status();
    if (status.ok()) {
      HeadView out{.actors = {}, .rejoining = status->rejoining};
      for (const cluster::ActorStatus& a : status->actors)
        out.actors[a.id] = a;
      return out;
    }
    if (!head_away(status.status()) || absl::Now() >= deadline) return status.status();
    absl::SleepFor(kHeadPoll);
  }
}

}  // namespace

std::optional<std::string> DataParallelTrainer::rank_lost(const HeadView& head, int d) {
  for (ActorId id : rank_actors(d)) {
    auto a = head.actors.find(id.value);
    if (a == head.actors.end()) {
      // A restarted head learns of actors as their nodes rejoin it.
      if (head.rejoining) continue;
      return std::string(
          "unknown to the restarted head: their node was lost while the head was down");
    }
    if (a->second.state != cluster::ActorState::kAlive ||
        a->second.restarts > known_restarts_[id.value]) {
      return a->second.death_reason;
    }
  }
  return std::nullopt;
}

std::vector<ActorId> DataParallelTrainer::rank_actors(int d) const {
  const Replica& r = replicas_[d];
  return {r.loader.id(), r.stage.id(), r.shard.id()};
}

absl::StatusOr<std::vector<LostMember>> DataParallelTrainer::find_lost(absl::Time deadline) {
  // The head may be away (restarting): it is waited for as a node would be.
  const absl::Time head_deadline =
      std::max(deadline, absl::Now() + absl::Seconds(config_.fault_tolerance.wait_for_node_s));
  for (;;) {
    absl::StatusOr<HeadView> head = head_view(cluster_, head_deadline);
    if (!head.ok()) return head.status();
    std::vector<LostMember> lost;
    for (int d = 0; d < static_cast<int>(replicas_.size()); ++d) {
      if (std::optional<std::string> why = rank_lost(*head, d)) {
        lost.push_back({.at = {.d = d, .p = 0, .t = 0}, .reason = *std::move(why)});
      }
    }
    // (While a restarted head still takes nodes back, what it does not know
    // yet may be on a node that has not rejoined: asked again.)
    if (!lost.empty() || (absl::Now() >= deadline && !head->rejoining)) return lost;
    absl::SleepFor(kPoll);
  }
}

absl::Status DataParallelTrainer::fence(const std::vector<LostMember>& hung) {
  for (const LostMember& m : hung) {
    if (absl::Status s = fence_rank_node(m.at.d, absl::StrCat("which hung: ", m.reason)); !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status DataParallelTrainer::fence_rank_node(int d, const std::string& why) {
  // The node of the rank's stage when the job last stood whole (its loader
  // and shard are in the same process). Fencing a node twice is harmless.
  auto node = known_nodes_.find(replicas_[d].stage.id().value);
  if (node == known_nodes_.end()) return absl::OkStatus();
  return cluster_.fence_node(node->second,
                             absl::StrCat("it hosts d", d, ".p0.t0 of job ", job_, ", ", why));
}

absl::Status DataParallelTrainer::member_lost(const actors::Coordinate& at) {
  // Once: the head not answering says nothing of the member (step_timeout
  // still bounds the wait).
  absl::StatusOr<HeadView> head = head_view(cluster_, absl::Now());
  if (!head.ok()) return absl::OkStatus();
  if (std::optional<std::string> why = rank_lost(*head, at.d)) {
    return absl::UnavailableError(
        absl::StrCat("the actors of ", actors::to_string(at), " were lost: ", *why));
  }
  return absl::OkStatus();
}

absl::Status DataParallelTrainer::await_replacements(const std::vector<LostMember>& lost,
                                                     absl::Time deadline) {
  for (;;) {
    absl::StatusOr<HeadView> head = head_view(cluster_, deadline);
    if (!head.ok()) return head.status();
    std::vector<std::string> missing;
    std::string reason;
    for (const LostMember& m : lost) {
      for (ActorId id : rank_actors(m.at.d)) {
        auto a = head->actors.find(id.value);
        if (a == head->actors.end()) {
          if (head->rejoining) {
            missing.push_back(actors::to_string(m.at));
            reason = "the restarted head is still taking its nodes back";
            break;
          }
          // Lost while the head was down: a head started again knows only
          // the actors of the nodes that rejoined it, and nothing restarts
          // these. New actors take the rank.
          if (absl::Status s = respawn_rank(m.at.d, deadline); !s.ok()) return s;
          break;
        }
        if (a->second.state == cluster::ActorState::kAlive) continue;
        if (a->second.state == cluster::ActorState::kDead) {
          return absl::FailedPreconditionError(
              absl::StrCat("the actors of ", actors::to_string(m.at), " cannot be restarted (",
                           a->second.death_reason, ")"));
        }
        missing.push_back(actors::to_string(m.at));
        reason = a->second.death_reason;
        break;
      }
    }
    if (missing.empty()) return absl::OkStatus();
    if (absl::Now() >= deadline) return no_node_for(missing, reason);
    absl::SleepFor(kPoll);
  }
}

absl::Status DataParallelTrainer::no_node_for(const std::vector<std::string>& missing,
                                              const std::string& reason) const {
  return absl::ResourceExhaustedError(
      absl::StrCat("no node took the place of ", absl::StrJoin(missing, ", "),
                   " within fault_tolerance.wait_for_node_s ",
                   config_.fault_tolerance.wait_for_node_s, " s (", reason,
                   "); add a worker (troupe worker --head ...), or keep spares "
                   "(fault_tolerance.spare_nodes)"));
}

absl::Status DataParallelTrainer::respawn_rank(int d, absl::Time deadline) {
  const actors::Coordinate at{.d = d, .p = 0, .t = 0};
  // The node the rank was on must not rejoin with the old actors (best
  // effort: the new actors' ids differ from the old ones in any case).
  fence_rank_node(d, "lost while the head was down").IgnoreError();
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
        absl::StrCat("its actors were lost while the head was down: ", placed.message()));
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
  absl::StatusOr<HeadView> head = head_view(cluster_, absl::Now());
  if (!head.ok()) return;  // find_lost compares with the older counts: a later loss still shows
  for (int d = 0; d < static_cast<int>(replicas_.size()); ++d) {
    for (ActorId id : rank_actors(d)) {
      auto a = head->actors.find(id.value);
      if (a == head->actors.end()) continue;
      known_restarts_[id.value] = a->second.restarts;
      known_nodes_[id.value] = a->second.node;
    }
  }
}

}  // namespace troupe::trainers
