#include "trainers/mesh_watch.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace troupe::trainers {
namespace {

constexpr absl::Duration kPoll = absl::Milliseconds(20);
constexpr absl::Duration kHeadPoll = absl::Milliseconds(100);

// The head does not answer (stopped, restarting), as opposed to refusing.
bool head_away(const absl::Status& s) {
  return absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s);
}

}  // namespace

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

absl::Status no_node_for(const std::vector<std::string>& missing, const std::string& reason,
                         int wait_for_node_s) {
  return absl::ResourceExhaustedError(
      absl::StrCat("no node took the place of ", absl::StrJoin(missing, ", "),
                   " within fault_tolerance.wait_for_node_s ", wait_for_node_s, " s (", reason,
                   "); add a worker (troupe worker --head ...), or keep spares "
                   "(fault_tolerance.spare_nodes)"));
}

std::optional<HeadAway> MeshWatch::head_away() const {
  std::optional<Cluster::HeadAway> away = cluster_.head_away();
  if (!away) return std::nullopt;
  return HeadAway{.address = cluster_.head_address(), .since = away->since, .grace = away->grace};
}

std::optional<std::string> MeshWatch::lost(const HeadView& head,
                                           const actors::Coordinate& at) const {
  for (ActorId id : actors_at_(at)) {
    auto a = head.actors.find(id.value);
    if (a == head.actors.end()) {
      // A restarted head learns of actors as their nodes rejoin it.
      if (head.rejoining) continue;
      return std::string(
          "unknown to the restarted head: their node was lost while the head was down");
    }
    auto known = known_restarts_.find(id.value);
    const int32_t restarts = known == known_restarts_.end() ? 0 : known->second;
    if (a->second.state != cluster::ActorState::kAlive || a->second.restarts > restarts) {
      return a->second.death_reason;
    }
  }
  return std::nullopt;
}

absl::StatusOr<std::vector<LostMember>> MeshWatch::find_lost(
    const std::vector<actors::Coordinate>& mesh, absl::Time deadline, int wait_for_node_s) {
  const absl::Time head_deadline = std::max(deadline, absl::Now() + absl::Seconds(wait_for_node_s));
  for (;;) {
    absl::StatusOr<HeadView> head = head_view(cluster_, head_deadline);
    if (!head.ok()) return head.status();
    std::vector<LostMember> out;
    for (const actors::Coordinate& at : mesh) {
      if (std::optional<std::string> why = lost(*head, at)) {
        out.push_back({.at = at, .reason = *std::move(why)});
      }
    }
    // (While a restarted head still takes nodes back, what it does not know
    // yet may be on a node that has not rejoined: asked again.)
    if (!out.empty() || (absl::Now() >= deadline && !head->rejoining)) return out;
    absl::SleepFor(kPoll);
  }
}

absl::Status MeshWatch::member_lost(const actors::Coordinate& at) {
  // Once: the head not answering says nothing of the member (step_timeout
  // still bounds the wait), and one known away is not asked.
  if (cluster_.head_away()) return absl::OkStatus();
  absl::StatusOr<HeadView> head = head_view(cluster_, absl::Now());
  if (!head.ok()) return absl::OkStatus();
  if (std::optional<std::string> why = lost(*head, at)) {
    return absl::UnavailableError(
        absl::StrCat("the actors of ", actors::to_string(at), " were lost: ", *why));
  }
  return absl::OkStatus();
}

absl::Status MeshWatch::fence(const actors::Coordinate& at, const std::string& why) {
  // The node of the coordinate's stage (its loader and shard are in the same
  // process).
  const std::vector<ActorId> ids = actors_at_(at);
  if (ids.size() < 2) return absl::OkStatus();
  auto node = known_nodes_.find(ids[1].value);
  if (node == known_nodes_.end()) return absl::OkStatus();
  return cluster_.fence_node(
      node->second, absl::StrCat("it hosts ", actors::to_string(at), " of job ", job_, ", ", why));
}

absl::Status MeshWatch::fence_hung(const std::vector<LostMember>& hung) {
  for (const LostMember& m : hung) {
    if (absl::Status s = fence(m.at, absl::StrCat("which hung: ", m.reason)); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status MeshWatch::await_replacements(const std::vector<LostMember>& lost, absl::Time deadline,
                                           const Respawn& respawn, int wait_for_node_s) {
  for (;;) {
    absl::StatusOr<HeadView> head = head_view(cluster_, deadline);
    if (!head.ok()) return head.status();
    std::vector<std::string> missing;
    std::string reason;
    for (const LostMember& m : lost) {
      for (ActorId id : actors_at_(m.at)) {
        auto a = head->actors.find(id.value);
        if (a == head->actors.end()) {
          if (head->rejoining) {
            missing.push_back(actors::to_string(m.at));
            reason = "the restarted head is still taking its nodes back";
            break;
          }
          // Lost while the head was down: a head started again knows only
          // the actors of the nodes that rejoined it, and nothing restarts
          // these. New actors take the coordinate.
          if (absl::Status s = respawn(m.at, deadline); !s.ok()) return s;
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
    if (absl::Now() >= deadline) return no_node_for(missing, reason, wait_for_node_s);
    absl::SleepFor(kPoll);
  }
}

void MeshWatch::mark_whole(const std::vector<actors::Coordinate>& mesh) {
  absl::StatusOr<HeadView> head = head_view(cluster_, absl::Now());
  if (!head.ok()) return;  // lost() compares with the older counts: a later loss still shows
  for (const actors::Coordinate& at : mesh) {
    for (ActorId id : actors_at_(at)) {
      auto a = head->actors.find(id.value);
      if (a == head->actors.end()) continue;
      known_restarts_[id.value] = a->second.restarts;
      known_nodes_[id.value] = a->second.node;
    }
  }
}

}  // namespace troupe::trainers
