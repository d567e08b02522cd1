// ParamShardActor: the fp32 master weights and optimizer state of its share
// of a stage (docs/design.md, "Training"): the range `range` of the stage's
// flat parameter buffer (the whole stage for DDP; this rank's partition for
// ZeRO, actors/zero_partition.h). The stage must hold the compute copy and
// the gradients of the range (StageTensors::params_held, grads_held).
//
// It lives in the process of its stage (same coordinate, same placement
// bundle) and reaches the stage's buffers through the hand-off table, so a
// commit moves no bytes over the network. A commit is two-phase, so that a
// step is applied by every shard or by none:
//
//   shard.call(&ParamShardActor::init)               // masters from the seed
//   ... every stage's run_step(k) returned ...
//   shard.call(&ParamShardActor::prepare, k)         // on every shard: may refuse
//   ... every shard prepared ...
//   shard.call(&ParamShardActor::commit, CommitRequest{k, lr, scale})   // cannot refuse
//
// Step ids (actors/training_types.h): prepare(k) is accepted when the shard
// holds weights (init or load_params ran: a restarted shard holds none), is at
// the step its stage's parameters are at, the stage holds step k's gradients
// and this shard has applied no step >= k. commit(k)
// applies a prepared k; commit of the step last applied succeeds again without
// applying it twice (so that a commit whose reply was lost can be retried).
// Anything else is FailedPrecondition naming both steps.
//
// Checkpoints (docs/checkpoint.md): save(request) copies the range's masters
// and optimizer state into a staging buffer - the only time the step boundary
// pays - and returns; a background thread writes them to this shard's file,
// each piece as soon as it is copied, and completes the returned future. At most one save is in
// flight per shard. load(request) reads the range from a checkpoint of any layout and puts the
// shard (and its stage) at the checkpoint's step.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "actors/mesh.h"
#include "actors/stage_tensors.h"
#include "actors/training_types.h"
#include "core/actor.h"
#include "core/actor_declare.h"
#include "nn/device_backend.h"
#include "nn/dtype.h"
#include "nn/memory.h"
#include "nn/model/layout.h"

namespace troupe::actors {

struct ShardOptions {
  std::string job;
  Coordinate at;
  nn::ModelConfig model;
  // The share of the stage's parameters this shard owns; empty (0, 0): all.
  nn::ParamRange range;
  OptimizerSpec optimizer;
  nn::DType precision = nn::DType::kFloat32;  // of the stage's compute copy
  uint64_t seed = 0;                          // the initialisation's
  // Tensor parallelism: the shard's parameters are of slice at.t of tp
  // (nn/model/layout.h), its range one of that slice's layout.
  int tp = 1;
  // Pretrained weights to start from instead of the seed's (training.init_from:
  // a safetensors file or a Hugging Face model directory, readable where the
  // shard runs; checkpoint/pretrained.h). Empty: none.
  std::string init_from;
  TROUPE_FIELDS(job, at, model, range, optimizer, precision, seed, tp, init_from);
};

class ParamShardActor {
 public:
  // InvalidArgument when the model is not valid, does not split into tp
  // slices, or the range does not lie inside its slice; ResourceExhausted
  // without the memory for the optimizer state.
  static absl::StatusOr<std::unique_ptr<ParamShardActor>> create(const ShardOptions& options);
  // Waits for a save in flight.
  ~ParamShardActor();

  // Sets the masters to the architecture's initialisation from the seed (or
  // to the pretrained weights of init_from), resets the
  // optimizer state and writes the compute copy into the stage's parameters.
  // Returns the number of parameters of the shard. FailedPrecondition if the
  // stage of this coordinate is not in this process.
  absl::StatusOr<int64_t> init();
  // The first phase of committing step `step`: checks, changing nothing, that
  // the commit can be applied (the step ids above, the stage's gradients
  // present).
  absl::Status prepare(int64_t step);
  // Applies step `request.step`'s optimizer update from the stage's reduced
  // gradients (scaled by grad_scale first) to the range and refreshes the
  // stage's compute copy of it. Returns the step applied.
  absl::StatusOr<int64_t> commit(CommitRequest request);
  // The last step applied (0: none).
  int64_t applied_step() const { return applied_step_; }
  // The fp32 master weights of the range (for saving them).
  absl::StatusOr<std::vector<float>> master_params();
  // Replaces the masters of the range (a loaded checkpoint) and refreshes the
  // stage's copy; the optimizer state starts afresh. InvalidArgument on a
  // size mismatch.
  absl::Status load_params(std::vector<float> params);
  // Optimizer updates applied so far (skipped steps apply none).
  int64_t applied_updates() const { return updates_; }
  // Saves the shard's state after step `request.step` (see above), or the
  // part request.range of it: the future completes once the file is
  // durable. FailedPrecondition for a range that is not a part of its own, a step
  // the shard is not at (a step prepared but not committed, a step before
  // the last applied), before init or load, or while a save is in flight;
  // the write's errors (ResourceExhausted for ENOSPC, Internal) through the
  // future.
  Future<ShardSaveReport> save(SaveRequest request);
  // Loads the range's masters and optimizer state from the checkpoint in
  // request.step_dir and goes to its step: applied_step() is the
  // checkpoint's, the stage runs the step after it next. InvalidArgument for
  // a checkpoint of another model or optimizer, or another request.range
  // than the one an initialised shard owns; DataLoss naming the file for
  // a missing, short or corrupt one (the shard then holds no weights until
  // a load or init succeeds); FailedPrecondition while the stage holds a
  // step's gradients. A tensor-parallel slice's shard reads its slice of the
  // checkpoint's tensors, whatever the tp that saved them.
  absl::StatusOr<ShardLoadReport> load(LoadRequest request);
  const nn::ParamRange& range() const { return range_; }

  // Recovery (docs/fault_tolerance.md). The shard's whole state after the
  // last step it applied (a step prepared but not committed changed
  // nothing). FailedPrecondition while it holds no weights.
  absl::StatusOr<ShardState> export_state();
  // Takes the state of a shard of the same range and goes to its step, as
  // load() does: applied_step() is state.step, the stage runs the step after
  // it next. A shard that holds no weights yet (a replacement) takes the
  // state's range, as its stage's partition may have moved since it was
  // spawned (elasticity; see also LoadRequest::range). InvalidArgument for another range or other
  // kinds of state; FailedPrecondition while the stage holds a step's gradients.
  absl::StatusOr<ShardRestoreReport> import_state(ShardState state);
  // Restores this shard (a replacement) from `source`, peer to peer: asks it
  // for its state and imports it. Errors: the source's and import_state's.
  Future<ShardRestoreReport> restore_from(ActorRef<ParamShardActor> source);

  // Elasticity under ZeRO (docs/elasticity.md): the partitions move when
  // the job's dp changes, in two phases over every shard of the new size.
  // The state of `part` (masters, optimizer state, step): of this shard's
  // own after its last applied step (a step prepared but not committed is
  // not in it), or (part.from_replica) of the replica it keeps, caught up
  // to the committed step part.replica_step. FailedPrecondition while it holds no weights, or no
  // replica of that step; InvalidArgument for a range that is not a part of
  // what it exports from.
  absl::StatusOr<ShardState> export_range(PartitionPart part);
  // Phase 1: fetches the state of `range` - the parts `parts` of it from the
  // shards `sources`, in order, tiling it (an empty range: one empty part,
  // for the step) - and keeps it aside; nothing of the shard changes.
  // InvalidArgument for parts that do not tile the range; the sources'
  // errors, and FailedPrecondition for parts at different steps; Aborted,
  // keeping nothing, when a later fetch_partition was called meanwhile.
  Future<void> fetch_partition(nn::ParamRange range, std::vector<ActorRef<ParamShardActor>> sources,
                               std::vector<PartitionPart> parts);
  // Phase 2, once every shard fetched and the stage took its new partition
  // (PipelineStageActor::resize): the fetched range becomes the shard's,
  // with its state, as import_state does. It has no buddy until one is set
  // again (set_buddy, for the new mesh). FailedPrecondition without a fetch;
  // import_state's errors.
  absl::StatusOr<ShardRestoreReport> adopt_partition();
  // How far the stage of this coordinate got in the step it is running,
  // answered while the stage is busy with it: how the controller tells a
  // hung rank from those waiting for it. FailedPrecondition if the stage is
  // not in this process.
  absl::StatusOr<StepProgress> progress();

  // Buddy replication (ZeRO; docs/fault_tolerance.md). A shard whose state
  // exists nowhere else keeps a replica of it in its buddy's memory, on
  // another node: the whole state whenever it is replaced wholesale (init,
  // load, import, or a new buddy), then each step's gradients and update,
  // sent when the step is prepared (before the commit point, so that a
  // committed step is never missing from the replica) and applied by the
  // buddy once the step is committed, overlapped with the next step.
  //
  // Makes `buddy` the keeper of this shard's replica and sends it the whole
  // state (if the shard holds weights). Completes once it holds it.
  Future<void> set_buddy(ActorRef<ParamShardActor> buddy);
  // Sends the buddy the gradients and update of the prepared step
  // `commit.step`; completes once it holds them. FailedPrecondition without
  // a buddy or unless the step is prepared.
  Future<void> replicate(CommitRequest commit);
  // At the buddy: the whole state of the shard it keeps a replica of.
  absl::Status hold_replica(ShardState state);
  // At the buddy: a step of that shard, to apply once committed. A step the
  // replica is not one behind of (after the previous step's update) is
  // FailedPrecondition.
  absl::Status hold_update(ReplicaUpdate update);
  // At the buddy: step `step` was committed; applies its update to the replica.
  void commit_replica(int64_t step);
  // At the buddy: the replica as it stands after committed step `step`
  // (applying that step's update if it has not yet). FailedPrecondition
  // when it holds no replica of that step.
  absl::StatusOr<ShardState> export_replica(int64_t step);
  // Restores this shard (a replacement) from the replica its buddy keeps of
  // the lost shard of this coordinate, at committed step `step`.
  Future<ShardRestoreReport> restore_from_buddy(ActorRef<ParamShardActor> buddy, int64_t step);
  // At the buddy, when the shard it keeps a replica of was lost and nothing
  // replaces it: writes the replica as it stands after committed step
  // `request.step` into request.step_dir, as that shard's file of a
  // checkpoint (named for request.owner, its whole range), and waits for it
  // to be durable.
  // FailedPrecondition when it holds no replica of that step; the write's
  // errors.
  absl::StatusOr<ShardSaveReport> save_replica(SaveRequest request);

 private:
  ParamShardActor(ShardOptions options, nn::ModelLayout layout, nn::ParamRange range);
  absl::Status allocate_state();
  // Makes `range` the shard's, its optimizer state allocated anew (its
  // values then set by the caller), unless it is the shard's already.
  absl::Status take_range(nn::ParamRange range);
  absl::Status clear_state();  // the optimizer's moments to zero
  // The shard's range of init_from's weights into `out`.
  absl::Status load_pretrained(float* out);
  // The kinds of state a checkpoint holds for this shard, in file order, with
  // where each lives (checkpoint/manifest.h).
  std::vector<std::pair<std::string, float*>> checkpoint_state(StageTensors& stage);
  absl::StatusOr<std::shared_ptr<StageTensors>> stage();
  // The optimizer update of step `commit` on state `p`, `m`, `v` of `n`
  // values with gradients `grads` (scaled in place): commit's and the
  // replica's, the same arithmetic.
  // On `device` of `backend`: the shard's own state on its device, a replica on the CPU.
  absl::Status apply_update(nn::DeviceBackend& backend, int device, const CommitRequest& commit,
                            int update, float* p, float* grads, float* m, float* v, size_t n,
                            const std::vector<nn::ParamRange>& no_decay) const;
  // Sends the whole state to the buddy, if there is one and the shard holds
  // weights; a failure is the next replicate()'s to report.
  void seed_buddy();
  Future<void> send_seed();
  // The masters of the range: the stage's own buffer in fp32, a separate one
  // otherwise.
  float* masters(StageTensors& stage);
  // The stage's compute copy and gradients of the range.
  float* stage_params(StageTensors& stage) const;
  float* stage_grads(StageTensors& stage) const;
  absl::Status refresh_compute_copy(StageTensors& stage);
  // Writes the range's masters from `host` (range_.size() floats in host memory).
  absl::Status write_masters(StageTensors& stage, const float* host);

  ShardOptions options_;
  std::string name_;
  nn::ModelLayout layout_;
  nn::ParamRange range_;
  std::vector<nn::ParamRange> no_decay_;  // AdamW's (biases, norm weights), in the range
  // The device of its stage, where its state lives and its update runs (the CPU when it has
  // no stage in this process).
  nn::Device device_;
  nn::DeviceBackend* backend_ = &nn::cpu_backend();
  nn::FloatBuffer master_;  // [range]: empty in fp32
  nn::FloatBuffer m_;       // [range]: AdamW's moments, or SGD's momentum in m_
  nn::FloatBuffer v_;
  std::vector<float> staging_;  // a save's copy of the state, while it is written
  std::thread writer_;          // the save in flight, if any
  std::atomic<bool> writing_{false};
  // The bytes of staging_ copied so far (the writer writes no further), and
  // the copy's time, written before the last store of staged_.
  std::atomic<uint64_t> staged_{0};
  std::atomic<double> staging_ms_{0};
  bool initialised_ = false;  // init or load_params ran: the masters hold weights
  int64_t prepared_ = 0;      // the step prepare() accepted, until its commit
  int64_t applied_step_ = 0;
  int64_t updates_ = 0;
  // Buddy replication: the shard keeping this one's replica, where the last
  // seed of it stands, and the replica this shard keeps of another.
  enum class SeedState { kNone, kInFlight, kHeld, kFailed };
  std::optional<ActorRef<ParamShardActor>> buddy_;
  std::shared_ptr<SeedState> buddy_seed_ = std::make_shared<SeedState>(SeedState::kNone);
  struct Replica {
    ShardState state;                      // after step state.step
    std::vector<nn::ParamRange> no_decay;  // AdamW's, in its range
    std::optional<ReplicaUpdate> pending;  // of step state.step + 1
  };
  std::optional<Replica> replica_;
  std::optional<ShardState> fetched_;  // fetch_partition's, until adopt_partition
  int64_t fetches_ = 0;                // fetch_partition calls: a late one's parts are dropped
};
TROUPE_ACTOR_DECLARE(ParamShardActor, &ParamShardActor::init, &ParamShardActor::prepare,
                     &ParamShardActor::commit, &ParamShardActor::applied_step,
                     &ParamShardActor::master_params, &ParamShardActor::load_params,
                     &ParamShardActor::applied_updates, &ParamShardActor::save,
                     &ParamShardActor::load, &ParamShardActor::export_state,
                     &ParamShardActor::import_state, &ParamShardActor::restore_from,
                     &ParamShardActor::progress, &ParamShardActor::set_buddy,
                     &ParamShardActor::replicate, &ParamShardActor::hold_replica,
                     &ParamShardActor::hold_update, &ParamShardActor::commit_replica,
                     &ParamShardActor::export_replica, &ParamShardActor::restore_from_buddy,
                     &ParamShardActor::save_replica, &ParamShardActor::export_range,
                     &ParamShardActor::fetch_partition, &ParamShardActor::adopt_partition);
// Other processes spawn it with its options: spawn<ParamShardActor>(spawn_options, shardOptions).
TROUPE_ACTOR_CONSTRUCTOR_DECLARE(ParamShardActor, ShardOptions);

}  // namespace troupe::actors
