// What the controller drives at each coordinate of the mesh: the calls it
// makes of a stage and of a parameter shard, whatever actors answer them.
// A trainer builds one MeshMember per coordinate from the actors it spawned
// (stage_endpoint<T>, shard_endpoint<T> over any actor type with the methods
// below); a test can drive the controller with stand-ins the same way.
//
// The calls, their step-id rules and errors are those of
// actors/pipeline_stage_actor.h and actors/param_shard_actor.h.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>

#include "actors/mesh.h"
#include "actors/training_types.h"
#include "core/actor.h"

namespace troupe::trainers {

class StageEndpoint {
 public:
  virtual ~StageEndpoint() = default;
  virtual Future<actors::StepReport> run_step(const actors::StepRequest& request) = 0;
  virtual Future<void> discard(int64_t step) = 0;
  virtual Future<int64_t> seek_data(int64_t position, int64_t from_samples_per_epoch) = 0;
  // Recovery: joins the latest generation of its group.
  virtual Future<void> rejoin() = 0;
  // Recovery of a resized job, and elasticity: joins it at `shape` (its
  // rank, dp, micro-batch and accumulation now; a restarted actor came back
  // with those it was spawned with).
  virtual Future<void> resize(const actors::StageShape& shape) = 0;
};

class ShardEndpoint {
 public:
  virtual ~ShardEndpoint() = default;
  virtual Future<void> prepare(int64_t step) = 0;
  virtual Future<int64_t> commit(const actors::CommitRequest& request) = 0;
  virtual Future<int64_t> applied_step() = 0;
  virtual Future<actors::ShardSaveReport> save(const actors::SaveRequest& request) = 0;
  virtual Future<actors::ShardLoadReport> load(const actors::LoadRequest& request) = 0;
  // Recovery: takes the whole state of `source`, a shard of the same range
  // (of the same actor type), peer to peer.
  virtual Future<actors::ShardRestoreReport> restore_from(ShardEndpoint& source) = 0;
  // How far the stage of its coordinate got in the step it runs (answered
  // while the stage is busy with it).
  virtual Future<actors::StepProgress> progress() = 0;
  // Buddy replication (actors/param_shard_actor.h): `buddy` keeps this
  // shard's replica; replicate sends it the prepared step; a replacement is
  // restored from the replica its buddy keeps, at committed step `step`.
  virtual Future<void> set_buddy(ShardEndpoint& buddy) = 0;
  virtual Future<void> replicate(const actors::CommitRequest& commit) = 0;
  virtual Future<actors::ShardRestoreReport> restore_from_buddy(ShardEndpoint& buddy,
                                                                int64_t step) = 0;
  // At the buddy of a lost shard nothing replaced: writes its replica into a
  // checkpoint as that shard's own file.
  virtual Future<actors::ShardSaveReport> save_replica(const actors::SaveRequest& request) = 0;
};

struct MeshMember {
  actors::Coordinate at;
  std::shared_ptr<StageEndpoint> stage;
  std::shared_ptr<ShardEndpoint> shard;
  // The range of its tensor slice's parameters the shard owns: members with
  // the same one hold copies of each other's state (recovery restores a lost
  // shard from such a copy). Empty (0, 0): unknown.
  nn::ParamRange range;
  // The member (its index in mesh order) whose shard keeps a replica of this
  // one's state (buddy replication, for state that exists once); -1: none.
  int buddy = -1;
};

namespace detail {

template <class Stage>
class ActorStageEndpoint : public StageEndpoint {
 public:
  explicit ActorStageEndpoint(ActorRef<Stage> ref) : ref_(std::move(ref)) {}
  Future<actors::StepReport> run_step(const actors::StepRequest& request) override {
    return ref_.call(&Stage::run_step, request);
  }
  Future<void> discard(int64_t step) override { return ref_.call(&Stage::discard, step); }
  Future<int64_t> seek_data(int64_t position, int64_t from_samples_per_epoch) override {
    return ref_.call(&Stage::seek_data, position, from_samples_per_epoch);
  }
  Future<void> rejoin() override { return ref_.call(&Stage::rejoin); }
  Future<void> resize(const actors::StageShape& shape) override {
    return ref_.call(&Stage::resize, shape);
  }

 private:
  ActorRef<Stage> ref_;
};

template <class Shard>
class ActorShardEndpoint : public ShardEndpoint {
 public:
  explicit ActorShardEndpoint(ActorRef<Shard> ref) : ref_(std::move(ref)) {}
  Future<void> prepare(int64_t step) override { return ref_.call(&Shard::prepare, step); }
  Future<int64_t> commit(const actors::CommitRequest& request) override {
    return ref_.call(&Shard::commit, request);
  }
  Future<int64_t> applied_step() override { return ref_.call(&Shard::applied_step); }
  Future<actors::ShardSaveReport> save(const actors::SaveRequest& request) override {
    return ref_.call(&Shard::save, request);
  }
  Future<actors::ShardLoadReport> load(const actors::LoadRequest& request) override {
    return ref_.call(&Shard::load, request);
  }
  Future<actors::ShardRestoreReport> restore_from(ShardEndpoint& source) override {
    const ActorRef<Shard>* peer = same_type(source);
    if (peer == nullptr) return not_same_type<actors::ShardRestoreReport>();
    return ref_.call(&Shard::restore_from, *peer);
  }
  Future<actors::StepProgress> progress() override { return ref_.call(&Shard::progress); }
  Future<void> set_buddy(ShardEndpoint& buddy) override {
    const ActorRef<Shard>* peer = same_type(buddy);
    if (peer == nullptr) return not_same_type<void>();
    return ref_.call(&Shard::set_buddy, *peer);
  }
  Future<void> replicate(const actors::CommitRequest& commit) override {
    return ref_.call(&Shard::replicate, commit);
  }
  Future<actors::ShardRestoreReport> restore_from_buddy(ShardEndpoint& buddy,
                                                        int64_t step) override {
    const ActorRef<Shard>* peer = same_type(buddy);
    if (peer == nullptr) return not_same_type<actors::ShardRestoreReport>();
    return ref_.call(&Shard::restore_from_buddy, *peer, step);
  }
  Future<actors::ShardSaveReport> save_replica(const actors::SaveRequest& request) override {
    return ref_.call(&Shard::save_replica, request);
  }

 private:
  // The actor behind another endpoint of this type, or null.
  static const ActorRef<Shard>* same_type(ShardEndpoint& other) {
    auto* peer = dynamic_cast<ActorShardEndpoint<Shard>*>(&other);
    return peer == nullptr ? nullptr : &peer->ref_;
  }
  template <class R>
  static Future<R> not_same_type() {
    return Future<R>::failed(
        absl::InvalidArgumentError("a shard endpoint of another actor type than this one"));
  }

  ActorRef<Shard> ref_;
};

}  // namespace detail

// The stage calls of an actor with run_step(StepRequest) -> StatusOr<StepReport>,
// discard(int64_t) -> Status, seek_data(int64_t, int64_t) -> StatusOr<int64_t>
// and rejoin() -> Status.
template <class Stage>
std::shared_ptr<StageEndpoint> stage_endpoint(ActorRef<Stage> ref) {
  return std::make_shared<detail::ActorStageEndpoint<Stage>>(std::move(ref));
}

// The shard calls of an actor with prepare(int64_t) -> Status,
// commit(CommitRequest) -> StatusOr<int64_t>, applied_step() -> int64_t,
// save(SaveRequest) -> Future<ShardSaveReport>,
// load(LoadRequest) -> StatusOr<ShardLoadReport>,
// restore_from(ActorRef<Shard>) -> Future<ShardRestoreReport>,
// progress() -> StatusOr<StepProgress>,
// set_buddy(ActorRef<Shard>) -> Future<void>, replicate(CommitRequest) ->
// Future<void>, restore_from_buddy(ActorRef<Shard>, int64_t) ->
// Future<ShardRestoreReport> and save_replica(SaveRequest) ->
// StatusOr<ShardSaveReport>.
template <class Shard>
std::shared_ptr<ShardEndpoint> shard_endpoint(ActorRef<Shard> ref) {
  return std::make_shared<detail::ActorShardEndpoint<Shard>>(std::move(ref));
}

}  // namespace troupe::trainers
