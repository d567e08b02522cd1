// What recovery (trainers/recovery.h) asks the head about a job's actors,
// for any trainer: which mesh coordinates' actors are gone or were restarted
// since the job last stood whole, waiting until the head has restarted them,
// and fencing the node of a coordinate that hung.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "actors/mesh.h"
#include "core/cluster/cluster.h"
#include "trainers/recovery.h"
#include "trainers/trainer_controller.h"

namespace troupe::trainers {

// The head's directory of actors as recovery reads it.
struct HeadView {
  std::map<uint64_t, cluster::ActorStatus> actors;
  bool rejoining = false;  // a restarted head still taking nodes back (ClusterStatus)
};

// The head's actors by id; while the head does not answer (it may be
// restarting), asked again until `deadline`.
absl::StatusOr<HeadView> head_view(Cluster& cluster, absl::Time deadline);

// ResourceExhausted: no node took the place of `missing` within
// fault_tolerance.wait_for_node_s, with `reason` and what the user can do.
absl::Status no_node_for(const std::vector<std::string>& missing, const std::string& reason,
                         int wait_for_node_s);

class MeshWatch {
 public:
  // The actors of a coordinate (its loader, stage and shard), as the trainer
  // holds them now.
  using ActorsAt = std::function<std::vector<ActorId>(const actors::Coordinate&)>;
  // Gives coordinate `at` new actors (its old ones are unknown to a
  // restarted head: nothing restarts them), placed by `deadline`.
  using Respawn = std::function<absl::Status(const actors::Coordinate& at, absl::Time deadline)>;

  MeshWatch(Cluster& cluster, std::string job, ActorsAt actors_at)
      : cluster_(cluster), job_(std::move(job)), actors_at_(std::move(actors_at)) {}

  // MeshRepair::head_away: whether this process hears from the head.
  std::optional<HeadAway> head_away() const;
  // Why the actors at `at`, as `head` sees them, are gone or were restarted
  // since mark_whole; nullopt while they are not.
  std::optional<std::string> lost(const HeadView& head, const actors::Coordinate& at) const;
  // The coordinates of `mesh` whose actors were lost, waiting until
  // `deadline` for the head to declare a loss (a failed collective is
  // reported by the survivors before the head has decided), and while the
  // head is away (restarting) as long as for a node: wait_for_node_s. Empty
  // when none was lost.
  absl::StatusOr<std::vector<LostMember>> find_lost(const std::vector<actors::Coordinate>& mesh,
                                                    absl::Time deadline, int wait_for_node_s);
  // TrainerController's member_lost: Unavailable, with the head's reason,
  // once the actors at `at` were lost; OK while they run where they ran when
  // the job last stood whole, and when the head cannot be asked.
  absl::Status member_lost(const actors::Coordinate& at);
  // Has the head declare dead the node the actors at `at` ran on when the
  // job last stood whole, saying `why`. Fencing a node twice is harmless.
  absl::Status fence(const actors::Coordinate& at, const std::string& why);
  // MeshRepair::fence: the nodes of the members found hung.
  absl::Status fence_hung(const std::vector<LostMember>& hung);
  // Waits until every actor of `lost` runs again (restarted by the head in
  // its bundle). A coordinate whose actors a restarted head does not know is
  // given new ones by `respawn`. FailedPrecondition for actors that cannot be
  // restarted; ResourceExhausted (no_node_for) at `deadline`.
  absl::Status await_replacements(const std::vector<LostMember>& lost, absl::Time deadline,
                                  const Respawn& respawn, int wait_for_node_s);
  // The job stands whole again: where each actor of `mesh` runs now, and how
  // often it was restarted, is what lost() compares with from now on.
  void mark_whole(const std::vector<actors::Coordinate>& mesh);

 private:
  Cluster& cluster_;
  std::string job_;
  ActorsAt actors_at_;
  // Each actor's restarts and node when the job last stood whole.
  std::map<uint64_t, int32_t> known_restarts_;
  std::map<uint64_t, uint32_t> known_nodes_;
};

}  // namespace troupe::trainers
