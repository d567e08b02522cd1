// TrainerController: drives the steps of a training job from the driver
// (docs/design.md, "Training"). It knows the mesh and, at each coordinate, a
// stage and a parameter shard to call (trainers/mesh_members.h); it knows
// nothing of a particular parallelism. A step is all-or-nothing:
//
//   1. run_step(k) on every stage, in parallel: forward, backward, gradient
//      exchange. Nothing is applied yet.
//   2. The reports are combined: the loss from the stages that hold it (the
//      last pipeline stage), the gradient norm summed over the distinct
//      parameter ranges the stages own (replicas of a range must agree bit for
//      bit; the ranges must tile each tensor slice's buffer).
//   3. If every stage succeeded and no gradient overflowed: clip on the global
//      norm, prepare(k) on every shard, replicate(k) on every shard with a
//      buddy (the step's gradients into the replica its buddy keeps), then
//      commit(k) on every shard (the optimizer update). Otherwise discard(k) on every stage, and
//      the step is either skipped (an fp16 overflow: the loss scale backs off, as DeepSpeed does)
//      or fails with the first stage's error.
//
// Where the job stands after step(k) returns - what recovery builds on:
//   OK, applied            every shard applied k
//   OK, not applied        k was skipped; no shard applied it
//   an error, k not applied (a stage failed, a report was inconsistent, a shard
//                          refused prepare): no shard applied k; next_step() is k
//                          again, so the step can be re-run
//   DeadlineExceeded, k not applied: a stage did not answer within
//                          step_timeout. The members that hung (as opposed to
//                          those waiting for them) are in hung(); the stages
//                          are left running (discarding would wait for them):
//                          recovery fences the hung ones and discards then.
//   an error from commit   every shard applied k but those in lost_shards():
//                          the shards lost in the commit, and any that refused
//                          it although they had prepared it (the protocol
//                          rules that out; a commit that failed for another
//                          reason than the shard's loss is retried once, and
//                          its shard asked where it stands). Those must be
//                          restored before the job goes on.
// The learning-rate schedule and the loss scaler live here, so every shard
// applies the same rate and scale.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "actors/mesh.h"
#include "nn/optim/loss_scaler.h"
#include "nn/optim/lr_schedule.h"
#include "trainers/mesh_members.h"
#include "trainers/step_reports.h"

namespace troupe::trainers {

struct ControllerOptions {
  nn::LrSchedule lr_schedule = nn::LrSchedule::constant(1e-3f);
  float gradient_clipping = 0;  // max global norm; 0: no clipping
  // fp16: a dynamic loss scaler (DeepSpeed's), or a static scale when
  // static_loss_scale > 0. Neither: no loss scaling.
  std::optional<nn::LossScalerConfig> dynamic_loss_scale;
  double static_loss_scale = 0;
  absl::Duration step_timeout = absl::Minutes(10);
  // Whether the member at a coordinate is still there: OK, or Unavailable
  // saying why not. Asked about every `member_poll` while a step's call to
  // that member is pending, so that a member lost without its call failing
  // fails the step within a poll rather than at step_timeout. Empty: not
  // asked.
  std::function<absl::Status(const actors::Coordinate&)> member_lost;
  absl::Duration member_poll = absl::Milliseconds(200);
};

// One pipeline stage's schedule in a step (actors::TimelineEvent).
struct StageTimeline {
  actors::Coordinate at;
  std::vector<actors::TimelineEvent> events;
  double schedule_ms = 0;
  double began_ms = 0;  // when it began, on its process's steady clock
};

// One step, as the controller saw it.
struct StepOutcome {
  int64_t step = 0;
  bool applied = false;  // false: skipped (fp16 overflow)
  double loss = 0;       // mean over the global batch
  double grad_norm = 0;  // global, unscaled, before clipping
  bool clipped = false;
  float lr = 0;           // the rate applied (0 when skipped)
  double loss_scale = 1;  // the scale this step ran with
  int64_t samples = 0;    // in the global batch
  int dp = 1;             // the data-parallel size the step ran at (elasticity changes it)
  int64_t tokens = 0;
  // The dataset's samples the step trained on (each rank's in mesh order):
  // the data log.
  std::vector<int64_t> sample_ids;
  int64_t data_position = 0;
  int64_t epoch = 0;
  double step_ms = 0;          // wall time of the whole step, as the driver saw it
  double compute_ms = 0;       // slowest stage: forward + backward
  double comm_ms = 0;          // slowest stage: gradient reductions, issue to completion, summed
  double comm_exposed_ms = 0;  // slowest stage: waiting for reductions after backward
  double overhead_ms = 0;      // step_ms minus the slowest stage's run_step and the commit
  double commit_ms = 0;  // the optimizer's update: prepare, replicate and commit on the shards
  // Per rank, the largest over the stages of each: what a rank holds (model
  // state, buffers, activations, peak RSS) and sent to its group this step.
  actors::MemoryReport memory;
  actors::TrafficReport sent;
  std::vector<RankUsage> ranks;  // each rank's, in mesh order
  // pp > 1: the pipeline's idle share of the step's schedule (StepTotals).
  double bubble = 0;
  // Each stage's schedule as it ran, in mesh order.
  std::vector<StageTimeline> timelines;
  // Whether the step ran a pipeline (pp > 1): `bubble` means something.
  bool pipelined() const {
    for (const StageTimeline& t : timelines)
      if (t.at.p > 0) return true;
    return false;
  }
};

// A coordinate whose actors were lost, or hung (found so by the controller,
// TrainerController::hung), and why ("node 3 (worker pid 4242) is dead: no
// heartbeat for 1.02 s"). Recovery treats a hung member as a lost one.
struct LostMember {
  actors::Coordinate at;
  std::string reason;
};

// Where the controller stands between steps: what a checkpoint records of
// it, and what restore() continues from.
struct ControllerState {
  int64_t next_step = 1;
  int64_t applied = 0;  // updates applied: the schedule's position
  // The dynamic loss scaler's state (fp16 with dynamic scaling only).
  std::optional<nn::LossScalerState> loss_scaler;
  // The data after the last finished step (0 before any).
  int64_t data_position = 0;
  int64_t epoch = 0;
};

class TrainerController {
 public:
  // InvalidArgument for a bad loss-scaler config, or members that are not
  // exactly one per coordinate of the mesh, each with a stage and a shard.
  static absl::StatusOr<TrainerController> create(actors::Mesh mesh,
                                                  std::vector<MeshMember> members,
                                                  ControllerOptions options);

  // Runs and commits (or skips) step `step` (see above). FailedPrecondition,
  // changing nothing, unless step == next_step().
  absl::StatusOr<StepOutcome> step(int64_t step);
  // The step step() accepts next: 1 at first; the step after the last one
  // finished (applied or skipped); the same step again after it failed
  // before any shard applied it.
  int64_t next_step() const { return next_step_; }
  // Optimizer updates applied (skipped steps apply none).
  int64_t applied_steps() const { return applied_; }
  double loss_scale() const;
  const actors::Mesh& mesh() const { return mesh_; }
  // Members in mesh order (actors::index_of).
  const std::vector<MeshMember>& members() const { return members_; }
  // The coordinates whose shard did not apply a committed step (lost, or
  // refused; see above); empty while the job is whole.
  const std::vector<actors::Coordinate>& lost_shards() const { return lost_shards_; }
  // After a step that failed with DeadlineExceeded: the members found hung
  // (see find_hung); empty otherwise, and once the next step starts.
  const std::vector<LostMember>& hung() const { return hung_; }
  // The parameter range each member's shard owns, in mesh order, as the
  // stages last reported them; empty before the first step ran.
  const std::vector<nn::ParamRange>& owned() const { return owned_; }
  // The last step that finished (applied, skipped, or committed with lost
  // shards), as step() saw it.
  const std::optional<StepOutcome>& last_outcome() const { return last_outcome_; }

  // Recovery: the actors at `at` were replaced by new ones (not restarted
  // under their ids): the member's calls go to `stage` and `shard` from now
  // on. InvalidArgument for a coordinate outside the mesh or a null one.
  absl::Status replace_member(const actors::Coordinate& at, std::shared_ptr<StageEndpoint> stage,
                              std::shared_ptr<ShardEndpoint> shard);

  // Elasticity: the job goes on over `mesh` with `members` (one per
  // coordinate, as create requires) from the next step; the step count, the
  // schedule and the loss scaler go on as they were. The caller has put the
  // actors in place: every stage at its new rank in the new group, every
  // shard holding the committed state. InvalidArgument as create's;
  // FailedPrecondition, changing nothing, while lost_shards() is not empty.
  absl::Status resize(actors::Mesh mesh, std::vector<MeshMember> members);

  // Buddy replication: makes every member's buddy (MeshMember::buddy) the
  // keeper of its replica and sends it the whole state; after init, and after
  // a recovery replaced members. The first error.
  absl::Status connect_buddies();

  ControllerState state() const;
  // Continues from `state` (a checkpoint's, once every shard loaded it and
  // every loader was moved to its cursor): next_step() is state.next_step.
  // InvalidArgument for a loss-scaler state the config could not have made,
  // or one missing (or present) where the config has (no) dynamic scaling.
  absl::Status restore(const ControllerState& state);

 private:
  TrainerController(actors::Mesh mesh, std::vector<MeshMember> members, ControllerOptions options)
      : mesh_(mesh), members_(std::move(members)), options_(std::move(options)) {}
  // `members` ordered as the mesh is (see create); InvalidArgument as create's.
  static absl::StatusOr<std::vector<MeshMember>> in_mesh_order(const actors::Mesh& mesh,
                                                               std::vector<MeshMember> members);
  // Has every member but those gone this step drop `step`: a lost member's
  // process holds nothing of it, and a call to its replacement waits for
  // the replacement's node (restart_wait) - a node there may never be.
  absl::Status discard_all(int64_t step);
  absl::Status prepare_all(int64_t step);
  absl::Status replicate_all(const actors::CommitRequest& commit);
  absl::Status commit_all(const actors::CommitRequest& commit);
  // Waits for member `i`'s call `f` until `deadline`, asking member_lost
  // meanwhile.
  // An error that is no loss in itself (FailedPrecondition: a stage not set
  // up, a shard holding no step) becomes one when member_lost says that
  // member `i` was lost: the head restarted its actors, and the call reached
  // the replacement before it was restored. A loss marks member `i` gone
  // for the rest of the step.
  template <class T>
  auto await_member(Future<T>& f, size_t i, absl::Time deadline) -> Result<T>;
  template <class T>
  auto wait_for_member(Future<T>& f, size_t i, absl::Time deadline) const -> Result<T>;
  // Unavailable when member `i`'s error `s` came of its loss (above), else OK.
  absl::Status loss_behind(size_t i, const absl::Status& s) const;
  // Which of the members in `pending` (whose run_step of `step` had not
  // answered by step_timeout) hung, from every member's progress
  // (ShardEndpoint::progress): one whose process does not answer; one that
  // issued fewer of the group's collectives than another member (that one
  // waits in a collective it has not reached); one that issued as many as
  // the others when `one_finished` (a member's run_step of `step` returned
  // its report: the rest is stuck on its own); one without a group. When
  // every member is pending at the same collective, none can be singled
  // out (the network between them, not a rank, is stuck) and none is; nor
  // when every member would be.
  std::vector<LostMember> find_hung(int64_t step, const std::vector<size_t>& pending,
                                    bool one_finished);

  actors::Mesh mesh_;
  std::vector<MeshMember> members_;
  ControllerOptions options_;
  std::optional<nn::DynamicLossScaler> scaler_;
  int64_t next_step_ = 1;
  int64_t applied_ = 0;
  std::vector<actors::Coordinate> lost_shards_;
  std::vector<LostMember> hung_;
  std::vector<bool> gone_;  // per member: a call of this step failed with its loss
  std::vector<nn::ParamRange> owned_;
  int64_t data_position_ = 0;
  int64_t epoch_ = 0;
  std::optional<StepOutcome> last_outcome_;
};

}  // namespace troupe::trainers
