// DataParallelTrainer's part of recovery (trainers/recovery.h): finding the
// ranks a lost node took with it, waiting for the head to restart their
// actors, and declaring the data-parallel group again.
#include <algorithm>
#include <map>
#include <set>

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

std::map<uint64_t, cluster::ActorStatus> by_id(const cluster::ClusterStatus& status) {
  std::map<uint64_t, cluster::ActorStatus> out;
  for (const cluster::ActorStatus& a : status.actors)
    out[a.id] = a;
  return out;
}

}  // namespace

std::vector<ActorId> DataParallelTrainer::rank_actors(int d) const {
  const Replica& r = replicas_[d];
  return {r.loader.id(), r.stage.id(), r.shard.id()};
}

absl::StatusOr<std::vector<LostMember>> DataParallelTrainer::find_lost(absl::Time deadline) {
  // The head may be away (restarting): it is waited for as a node would be.
  const absl::Time head_deadline =
      std::max(deadline, absl::Now() + absl::Seconds(config_.fault_tolerance.wait_for_node_s));
  for (;;) {
    absl::StatusOr<cluster::ClusterStatus> status = cluster_.status();
    if (!status.ok()) {
      if (!head_away(status.status()) || absl::Now() >= head_deadline) return status.status();
      absl::SleepFor(kHeadPoll);
      continue;
    }
    const std::map<uint64_t, cluster::ActorStatus> actors = by_id(*status);
    std::vector<LostMember> lost;
    for (int d = 0; d < static_cast<int>(replicas_.size()); ++d) {
      for (ActorId id : rank_actors(d)) {
        auto a = actors.find(id.value);
        const bool gone = a == actors.end() || a->second.state != cluster::ActorState::kAlive ||
                          a->second.restarts > known_restarts_[id.value];
        if (!gone) continue;
        std::string why =
            a == actors.end() ? std::string("unknown to the head") : a->second.death_reason;
        lost.push_back({.at = {.d = d, .p = 0, .t = 0}, .reason = std::move(why)});
        break;
      }
    }
    if (!lost.empty() || absl::Now() >= deadline) return lost;
    absl::SleepFor(kPoll);
  }
}

absl::Status DataParallelTrainer::member_lost(const actors::Coordinate& at) {
  absl::StatusOr<cluster::ClusterStatus> status = cluster_.status();
  if (!status.ok()) return absl::OkStatus();  // cannot tell; step_timeout still bounds the wait
  const std::map<uint64_t, cluster::ActorStatus> actors = by_id(*status);
  for (ActorId id : rank_actors(at.d)) {
    auto a = actors.find(id.value);
    if (a == actors.end()) continue;
    if (a->second.state != cluster::ActorState::kAlive ||
        a->second.restarts > known_restarts_[id.value]) {
      return absl::UnavailableError(absl::StrCat("the actors of ", actors::to_string(at),
                                                 " were lost: ", a->second.death_reason));
    }
  }
  return absl::OkStatus();
}

absl::Status DataParallelTrainer::await_replacements(const std::vector<LostMember>& lost,
                                                     absl::Time deadline) {
  for (;;) {
    absl::StatusOr<cluster::ClusterStatus> status = cluster_.status();
    if (!status.ok()) {
      if (!head_away(status.status()) || absl::Now() >= deadline) return status.status();
      absl::SleepFor(kHeadPoll);
      continue;
    }
    const std::map<uint64_t, cluster::ActorStatus> actors = by_id(*status);
    std::vector<std::string> missing;
    std::string reason;
    for (const LostMember& m : lost) {
      for (ActorId id : rank_actors(m.at.d)) {
        auto a = actors.find(id.value);
        if (a == actors.end()) {
          // A head started again knows only the actors of the nodes that
          // rejoined it: one lost meanwhile is nobody's to restart.
          return absl::FailedPreconditionError(absl::StrCat(
              "the actors of ", actors::to_string(m.at),
              " are unknown to the head (it was restarted after they were lost), so nothing "
              "restarts them"));
        }
        if (a->second.state == cluster::ActorState::kAlive) continue;
        if (a->second.state == cluster::ActorState::kDead) {
          return absl::FailedPreconditionError(
              absl::StrCat("the actors of ", actors::to_string(m.at), " cannot be restarted (",
                           a->second.death_reason, ")"));
        }
        missing.push_back(actors::to_string(m.at));
        if (a != actors.end()) reason = a->second.death_reason;
        break;
      }
    }
    if (missing.empty()) return absl::OkStatus();
    if (absl::Now() >= deadline) {
      return absl::ResourceExhaustedError(
          absl::StrCat("no node took the place of ", absl::StrJoin(missing, ", "),
                       " within fault_tolerance.wait_for_node_s ",
                       config_.fault_tolerance.wait_for_node_s, " s (", reason,
                       "); add a worker (troupe worker --head ...), or keep spares "
                       "(fault_tolerance.spare_nodes)"));
    }
    absl::SleepFor(kPoll);
  }
}

absl::Status DataParallelTrainer::declare_groups() {
  if (replicas_.size() < 2) return absl::OkStatus();
  std::vector<ActorId> stages;
  for (const Replica& r : replicas_)
    stages.push_back(r.stage.id());
  return declare_collective_group(cluster_, job_ + "/dp", stages).status();
}

void DataParallelTrainer::mark_whole() {
  absl::StatusOr<cluster::ClusterStatus> status = cluster_.status();
  if (!status.ok()) return;  // find_lost compares with the older counts: a later loss still shows
  const std::map<uint64_t, cluster::ActorStatus> actors = by_id(*status);
  for (int d = 0; d < static_cast<int>(replicas_.size()); ++d) {
    for (ActorId id : rank_actors(d)) {
      auto a = actors.find(id.value);
      if (a != actors.end()) known_restarts_[id.value] = a->second.restarts;
    }
  }
}

}  // namespace troupe::trainers
