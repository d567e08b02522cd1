// Recovery from a lost worker (docs/fault_tolerance.md): a step that failed
// because actors of the mesh were lost - their node killed, hung or gone - is
// aborted on the survivors and run again once the lost coordinates have
// replacements holding the state they had, so that the job loses the step in
// flight and nothing else:
//
//   detect    the head declares the node dead (missed heartbeats, or a
//             peer's broken connection), or the controller finds a rank hung
//             (no answer within step_timeout while the others wait for it)
//             and has the head fence its node (MeshRepair::fence); the
//             trainer finds which coordinates had actors there
//             (MeshRepair::find_lost)
//   replace   the head restarts those actors in their placement bundle,
//             re-placed on a spare node, a node with room, or one that joins
//             (MeshRepair::await_replacements)
//   restore   the survivors drop the aborted step; the collective groups are
//             declared again (a new generation) and every stage rejoins; each
//             lost shard takes the whole state of a surviving shard of the
//             same range, peer to peer (a DDP replica); every loader goes
//             back to the committed cursor
//   resume    the aborted step runs again: the replacement has the lost
//             coordinate's rank and data slice, so the weights stay bitwise
//             those of a run that never failed
//
// When no surviving shard holds a lost shard's range (a ZeRO partition), the
// job goes back to its latest checkpoint instead and runs the steps since
// again, and the report says so.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "actors/mesh.h"
#include "core/ids.h"
#include "trainers/config.h"
#include "trainers/trainer_controller.h"

namespace troupe::trainers {

class Checkpointer;
class Trainer;

// The head not answering (MeshRepair::head_away): while it is away nothing
// can be declared dead or restarted.
struct HeadAway {
  std::string address;   // "HOST:PORT"
  absl::Time since;      // its last answer
  absl::Duration grace;  // the cluster's processes give up on it this long after `since`
};

// What a trainer does for recovery on its cluster: the parts of it that
// know actors, nodes and groups.
class MeshRepair {
 public:
  virtual ~MeshRepair() = default;
  // Whether the head answers (a loss is found and mended through it):
  // nullopt if it does, else since when it has not.
  virtual std::optional<HeadAway> head_away() const { return std::nullopt; }
  // The coordinates whose actors are gone or were restarted since the job
  // last stood whole, waiting until `deadline` for the head to declare a
  // loss (a failed collective is reported by the survivors before the head
  // has decided). Empty when none was lost: the failure was of another kind.
  virtual absl::StatusOr<std::vector<LostMember>> find_lost(absl::Time deadline) = 0;
  // Has the head declare the nodes of the `hung` coordinates' actors dead
  // (Cluster::fence_node), so that they are lost as any dead node's are:
  // the ranks that wait for them fail their step, and find_lost finds them.
  virtual absl::Status fence(const std::vector<LostMember>& hung) = 0;
  // Waits until every actor of `lost` runs again (restarted by the head).
  // ResourceExhausted (no node had room for them), naming what is still
  // missing and why, at `deadline`.
  virtual absl::Status await_replacements(const std::vector<LostMember>& lost,
                                          absl::Time deadline) = 0;
  // Declares the next generation of the job's collective groups, with the
  // stages as they are now (the survivors and the replacements).
  virtual absl::Status declare_groups() = 0;
  // The job stands whole again: what find_lost compares with from now on.
  virtual void mark_whole() = 0;
  // The loaders' samples per epoch (for putting them back at a cursor).
  virtual int64_t samples_per_epoch() const = 0;
  // The actors of coordinate `at` now: its loader, stage and shard.
  virtual std::vector<ActorId> actors_at(const actors::Coordinate& at) const = 0;
  // The shape the stage at `at` has now, when it may differ from the one
  // its actors were spawned with (the job was resized): a replacement -
  // restarted with its spawn-time options - joins at it. nullopt: it rejoins
  // as spawned.
  virtual std::optional<actors::StageShape> shape_of(const actors::Coordinate& at,
                                                     int64_t position) const {
    (void)at;
    (void)position;
    return std::nullopt;
  }
};

// One recovery, as the progress line, the metrics and the summary show it.
struct RecoveryReport {
  int64_t step = 0;     // the step that was aborted and run again
  std::string failure;  // what the step failed with
  std::vector<LostMember> lost;
  // How each lost shard got its state back: "d1 from d0 (1.2 MiB, 4 ms)".
  std::vector<std::string> restored;
  // No surviving copy: the job went back to the checkpoint of this step.
  std::optional<int64_t> checkpoint_step;
  int64_t steps_lost = 0;  // steps run again (1: the step in flight)
  // When the controller took up the failed step (steady clock, ms since its
  // epoch), and from then: until the loss was known, until the replacements
  // ran, until their state and the groups were back.
  double started_ms = 0;
  double detect_ms = 0;
  double replace_ms = 0;
  double restore_ms = 0;
  double total_ms = 0;
  // "step 143: lost d1 (node 3 ... is dead: ...); d1 restored from d0 in 0.41 s; step re-run"
  std::string summary() const;
};

// Runs steps through a trainer's controller and recovers the job when a step
// fails because workers were lost (config.enabled), up to max_failures times
// in all. Without fault tolerance it is the controller's step() as it is.
class RecoveringStepper {
 public:
  // `checkpoints`: the fallback when no surviving copy of a lost shard
  // exists; may be null (then such a loss ends the job).
  RecoveringStepper(Trainer& trainer, Checkpointer* checkpoints, FaultToleranceConfig config);

  // Runs step `step` (the controller's next_step()) to its end, recovering
  // from lost workers on the way: each recovery is passed to `on_recovery`
  // as it completes. Errors: the step's own, when it did not fail through a
  // loss; a loss past max_failures, or one recovery could not mend (no node
  // for a replacement within wait_for_node_s; no copy and no checkpoint),
  // with the step's failure and why.
  absl::StatusOr<StepOutcome> step(int64_t step,
                                   const std::function<void(const RecoveryReport&)>& on_recovery);

  // Where to say what a recovery waits for while it waits (the head, when it
  // does not answer): a line at once, and then every few seconds. The
  // progress output prints them.
  void set_on_note(std::function<void(const std::string&)> on_note) {
    on_note_ = std::move(on_note);
  }

  // Recoveries made (what max_failures bounds).
  int failures() const { return failures_; }
  // Recoveries so far.
  const std::vector<RecoveryReport>& recoveries() const { return recoveries_; }
  // After step() failed because a recovery could not be made (no node took
  // the place of lost members within wait_for_node_s, or no head came back
  // to replace them in that time): their coordinates. A
  // last checkpoint is saved without them (Checkpointer::save_now). Empty
  // otherwise.
  const std::vector<actors::Coordinate>& unrecovered() const { return unrecovered_; }
  // The wall time the recoveries cost, measured: for each step that needed
  // one, the time step() took beyond the one attempt whose outcome stands -
  // the failed attempts, the recoveries (RecoveryReport::total_ms), and the
  // steps run again since a checkpoint. Counted when the step stands.
  double lost_ms() const { return lost_ms_; }

 private:
  // Mends the job after `failure` of step `step`; the report of it, or why
  // it could not. NotFound when no member was lost.
  absl::StatusOr<RecoveryReport> recover(int64_t step, const absl::Status& failure);
  // Every lost shard from a surviving shard of its range; false when one has none.
  absl::StatusOr<bool> restore_from_replicas(const std::vector<LostMember>& lost,
                                             RecoveryReport& report);
  // While the head does not answer: which members were lost (their process
  // does not answer either), said at once, and a wait for the head until
  // `until` at most. OK once it answers (or when it never went away);
  // NotFound when no member was lost; Unavailable when it did not come back
  // in time, with unrecovered() set to the lost members.
  absl::Status await_head(int64_t step, absl::Time until);
  // The members whose process does not answer (asked directly, not through
  // the head), and those the controller found hung.
  std::vector<LostMember> unanswering();
  void note(const std::string& line) const {
    if (on_note_) on_note_(line);
  }

  Trainer& trainer_;
  Checkpointer* checkpoints_;
  FaultToleranceConfig config_;
  int failures_ = 0;
  std::vector<RecoveryReport> recoveries_;
  std::vector<actors::Coordinate> unrecovered_;
  std::function<void(const std::string&)> on_note_;
  double lost_ms_ = 0;
};

}  // namespace troupe::trainers
