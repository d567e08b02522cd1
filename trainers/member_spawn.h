// The actors of one mesh coordinate of a training job - its data loader,
// pipeline stage and parameter shard - spawned together in one placement
// bundle, as every trainer spawns them (docs/training.md).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "actors/data/data_loader_actor.h"
#include "actors/mesh.h"
#include "actors/param_shard_actor.h"
#include "actors/pipeline_stage_actor.h"
#include "core/cluster/cluster.h"
#include "trainers/config.h"

namespace troupe::trainers {

struct MemberActors {
  ActorRef<actors::DataLoaderActor> loader;
  ActorRef<actors::PipelineStageActor> stage;
  ActorRef<actors::ParamShardActor> shard;
};

struct MemberPlace {
  actors::Coordinate at;
  actors::Mesh mesh;
  // What its stage holds of the bundle: a CPU, or nothing (a chunk of an
  // interleaved stage taking turns on the first chunk's CPU).
  std::string stage_resources = "CPU=1";
  // The job name its actors' names are made from.
  std::string names;
  // Where: the placement group and bundle, and max_restarts (its resources
  // are set here: the stage holds the CPU).
  SpawnOptions where;
  int threads = 0;             // the stage's compute threads; 0: the worker's default
  std::string dp_group;        // the stage's data-parallel group
  std::string pipe_group;      // pp > 1: its replica's stages'
  std::string tp_group;        // tp > 1: its stage's slices'
  nn::ParamRange shard_range;  // what the shard owns
};

// The stage's options at `place` under `config` (its batch split, gradient
// sync and schedule).
actors::StageOptions stage_options(const TrainConfig& config, const MemberPlace& place);

// Spawns the loader, stage and shard of `place`, appending each actor's id to
// `spawned` as it comes (for the caller to kill on failure). Errors: those of
// Cluster::spawn and of the actors' constructors.
absl::StatusOr<MemberActors> spawn_member(Cluster& cluster, const TrainConfig& config,
                                          const MemberPlace& place, std::vector<ActorId>* spawned);

// The master weights of `shards`, whose ranges tile the model in this
// order, concatenated: the whole model's. The first error.
absl::StatusOr<std::vector<float>> gather_masters(
    const std::vector<ActorRef<actors::ParamShardActor>>& shards, absl::Duration timeout);

// Kills `actors` in reverse order of spawning (each coordinate's shard, then
// its stage, which holds the groups, then its loader) and removes the
// placement groups; actors already gone are no error. The first error.
absl::Status stop_job(Cluster& cluster, const std::vector<ActorId>& actors,
                      const std::vector<cluster::PlacementGroupId>& placement_groups);

}  // namespace troupe::trainers
