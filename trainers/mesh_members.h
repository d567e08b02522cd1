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
};

class ShardEndpoint {
 public:
  virtual ~ShardEndpoint() = default;
  virtual Future<void> prepare(int64_t step) = 0;
  virtual Future<int64_t> commit(const actors::CommitRequest& request) = 0;
  virtual Future<int64_t> applied_step() = 0;
  virtual Future<actors::ShardSaveReport> save(const actors::SaveRequest& request) = 0;
  virtual Future<actors::ShardLoadReport> load(const actors::LoadRequest& request) = 0;
};

struct MeshMember {
  actors::Coordinate at;
  std::shared_ptr<StageEndpoint> stage;
  std::shared_ptr<ShardEndpoint> shard;
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

 private:
  ActorRef<Shard> ref_;
};

}  // namespace detail

// The stage calls of an actor with run_step(StepRequest) -> StatusOr<StepReport>,
// discard(int64_t) -> Status and seek_data(int64_t, int64_t) -> StatusOr<int64_t>.
template <class Stage>
std::shared_ptr<StageEndpoint> stage_endpoint(ActorRef<Stage> ref) {
  return std::make_shared<detail::ActorStageEndpoint<Stage>>(std::move(ref));
}

// The shard calls of an actor with prepare(int64_t) -> Status,
// commit(CommitRequest) -> StatusOr<int64_t>, applied_step() -> int64_t,
// save(SaveRequest) -> Future<ShardSaveReport> and
// load(LoadRequest) -> StatusOr<ShardLoadReport>.
template <class Shard>
std::shared_ptr<ShardEndpoint> shard_endpoint(ActorRef<Shard> ref) {
  return std::make_shared<detail::ActorShardEndpoint<Shard>>(std::move(ref));
}

}  // namespace troupe::trainers
