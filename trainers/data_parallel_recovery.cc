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
absl::StatusOr<std::map<uint64_t, cluster::ActorStatus>> actor_table(Cluster& cluster,
                                                                     absl::Time deadline) {
  for (;;) {
    absl::StatusOr<cluster::ClusterStatus> status = cluster.status();
    if (status.ok()) {
      std::map<uint64_t, cluster::ActorStatus> out;
      for (const cluster::ActorStatus& a : status->actors)
        out[a.id] = a;
      return out;
    }
    if (!head_away(status.status()) || absl::Now() >= deadline) return status.status();
    absl::SleepFor(kHeadPoll);
  }
}

}  // namespace

std::optional<std::string> DataParallelTrainer::rank_lost(
    const std::map<uint64_t, cluster::ActorStatus>& actors, int d) {
  for (ActorId id : rank_actors(d)) {
    auto a = actors.find(id.value);
    if (a == actors.end()) return std::string("unknown to the head");
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
    absl::StatusOr<std::map<uint64_t, cluster::ActorStatus>> actors =
        actor_table(cluster_, head_deadline);
    if (!actors.ok()) return actors.status();
    std::vector<LostMember> lost;
    for (int d = 0; d < static_cast<int>(replicas_.size()); ++d) {
      if (std::optional<std::string> why = rank_lost(*actors, d)) {
        lost.push_back({.at = {.d = d, .p = 0, .t = 0}, .reason = *std::move(why)});
      }
    }
    if (!lost.empty() || absl::Now() >= deadline) return lost;
    absl::SleepFor(kPoll);
  }
}

absl::Status DataParallelTrainer::member_lost(const actors::Coordinate& at) {
  // Once: the head not answering says nothing of the member (step_timeout
  // still bounds the wait).
  absl::StatusOr<std::map<uint64_t, cluster::ActorStatus>> actors =
      actor_table(cluster_, absl::Now());
  if (!actors.ok()) return absl::OkStatus();
  if (std::optional<std::string> why = rank_lost(*actors, at.d)) {
    return absl::UnavailableError(
        absl::StrCat("the actors of ", actors::to_string(at), " were lost: ", *why));
  }
  return absl::OkStatus();
}

absl::Status DataParallelTrainer::await_replacements(const std::vector<LostMember>& lost,
                                                     absl::Time deadline) {
  for (;;) {
    absl::StatusOr<std::map<uint64_t, cluster::ActorStatus>> table =
        actor_table(cluster_, deadline);
    if (!table.ok()) return table.status();
    const std::map<uint64_t, cluster::ActorStatus>& actors = *table;
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
  absl::StatusOr<std::map<uint64_t, cluster::ActorStatus>> table =
      actor_table(cluster_, absl::Now());
  if (!table.ok()) return;  // find_lost compares with the older counts: a later loss still shows
  const std::map<uint64_t, cluster::ActorStatus>& actors = *table;
  for (int d = 0; d < static_cast<int>(replicas_.size()); ++d) {
    for (ActorId id : rank_actors(d)) {
      auto a = actors.find(id.value);
      if (a != actors.end()) known_restarts_[id.value] = a->second.restarts;
    }
  }
}

}  // namespace troupe::trainers
