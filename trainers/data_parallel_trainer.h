// The data-parallel trainer: dp ranks of the whole model, each a stage, a
// parameter shard and a data loader co-located in one placement-group bundle
// (one rank per node where the cluster has the nodes: SPREAD).
//   zero_optimization.stage 0  DDP: every shard owns the whole stage;
//                              gradients averaged in buckets that overlap
//                              backward (actors/allreduce_gradient_sync.h)
//   stages 1, 2, 3             ZeRO: shard r owns partition r of the stage
//                              (actors/zero_partition.h); gradients
//                              reduce-scattered, parameters gathered
//                              (actors/zero_gradient_sync.h, docs/zero.md)
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "actors/param_shard_actor.h"
#include "trainers/elastic_scaler.h"
#include "trainers/mesh_trainer.h"

namespace troupe::trainers {

// Where the last resize's time went (DataParallelTrainer::resize).
struct ResizeTimes {
  double spawn_ms = 0;  // placing and spawning the new ranks
  double state_ms = 0;  // their committed state, peer to peer
  double group_ms = 0;  // the group at the new size, the loaders moved
};

class DataParallelTrainer : public MeshTrainer, public ElasticMesh {
 public:
  // Places and spawns the actors of every rank, forms the data-parallel
  // group, initialises the parameters (the same seed on every rank, each
  // shard its range). InvalidArgument for a config it does not run (pp or
  // tp > 1); otherwise as start_trainer.
  static absl::StatusOr<std::unique_ptr<DataParallelTrainer>> start(Cluster& cluster,
                                                                    const TrainConfig& config,
                                                                    const std::string& job,
                                                                    int threads);

  // On rank 0 (every rank holds the same weights; under ZeRO every stage
  // gathers them first).
  absl::StatusOr<actors::EvalReport> evaluate(int samples) override;
  absl::StatusOr<actors::ValidationResult> validate() override;
  absl::StatusOr<std::vector<int32_t>> generate(std::vector<int32_t> prompt, int max_new_tokens,
                                                float temperature, uint64_t seed) override;
  absl::StatusOr<std::vector<float>> master_params() override;
  std::string describe() const override;
  // Recovery (trainers/mesh_trainer.h); for elasticity too (ElasticMesh).
  absl::StatusOr<std::vector<LostMember>> find_lost(absl::Time deadline) override {
    return MeshTrainer::find_lost(deadline);
  }
  // After a resize, rank at.d's shape at the job's size now.
  std::optional<actors::StageShape> shape_of(const actors::Coordinate& at,
                                             int64_t position) const override;
  // Elasticity (docs/elasticity.md): between steps, the job goes on over the
  // ranks `keep` (old ranks, in their new order) followed by a new rank per
  // entry of `target_nodes`, with the same global batch (plan_batch). The
  // new ranks' actors are spawned on nodes with room, each on its target
  // node where it has room (-1: any; waiting up to `deadline`), and take the
  // committed state peer to peer: a DDP replica's from a kept rank; under
  // ZeRO every shard of the new size fetches its new partition from the old
  // owners before anything changes (a lost owner's part from the replica
  // its buddy keeps) and adopts it once the group is formed. Every loader
  // continues at the committed data position; the group is declared again
  // at the new size; the buddies' replicas are seeded again; the actors of
  // ranks not kept are killed. A rank lost later is replaced at its shape
  // then (shape_of). FailedPrecondition, changing nothing, for a size the
  // batch rule refuses (its reason), a rank kept twice or out of range, or
  // a lost rank whose partition was lost with its replica;
  // ResourceExhausted when no node had room for the new ranks by
  // `deadline`; Unimplemented for ZeRO-2/3 to or from dp 1.
  absl::Status resize(const std::vector<int>& keep, std::vector<int32_t> target_nodes,
                      absl::Time deadline) override;
  int dp() const override { return static_cast<int>(replicas_.size()); }
  std::vector<std::optional<uint32_t>> rank_nodes(
      const cluster::ClusterStatus& status) const override;
  // The scaler when elasticity.enabled, else null.
  ElasticMesh* elastic() override { return config_.elasticity.enabled ? this : nullptr; }
  // Whether a loss is mended by replacing the lost ranks (fault tolerance)
  // rather than by going on without them.
  bool replaces_losses() const { return config_.fault_tolerance.enabled; }
  const ResizeTimes& last_resize() const { return last_resize_; }
  // The actors of rank d: its loader, stage and shard.
  std::vector<ActorId> rank_actors(int d) const { return actors_at({.d = d, .p = 0, .t = 0}); }

 private:
  struct Replica : MemberActors {
    cluster::PlacementGroupId group;  // whose bundle it holds
  };

  DataParallelTrainer(Cluster& cluster, TrainConfig config, std::string job, int threads)
      : MeshTrainer(cluster, config, std::move(job), threads), configured_(std::move(config)) {}
  // The mesh dp x 1 x 1: rank d is replicas_[d], holding the whole model.
  actors::Mesh mesh() const override { return {.dp = dp(), .pp = 1, .tp = 1}; }
  const MemberActors& member_at(const actors::Coordinate& at) const override {
    return replicas_[at.d];
  }
  nn::ParamRange stage_params(int p) const override;
  // Recovery: rank at.d's actors, in a placement group of their own (after
  // a resize under names of their own: those made from job_ and d may be a
  // live rank's).
  absl::StatusOr<MemberActors> spawn_replacement(const actors::Coordinate& at,
                                                 cluster::PlacementGroupId pg) override;
  std::string replacement_group(const actors::Coordinate& at) const override;
  absl::Status spawn_replicas();
  // Elastic jobs: a single-bundle group per rank, each on the node `spread`
  // (placed, then removed) put that rank's bundle on, where it has room.
  absl::StatusOr<std::vector<cluster::PlacementGroupId>> rank_groups(
      cluster::PlacementGroupId spread);
  // Rank d's loader, stage and shard, in bundle `bundle` of `group`.
  // `names`: the job name its actors' names are made from (job_, or after a
  // resize a name of its own, so that they differ from the old ranks');
  // `config`: the job's (or, in a resize, the new size's).
  absl::StatusOr<Replica> spawn_replica(int d, cluster::PlacementGroupId group, int bundle,
                                        const std::string& names, const TrainConfig& config);
  // Elasticity under ZeRO: each shard of `next` (the ranks of the new size,
  // in order) fetches its new partition from the old owners (replicas_),
  // the parts of the ranks `lost` from the replicas their buddies keep.
  // FailedPrecondition when a lost rank's buddy is lost too (or none).
  absl::Status fetch_partitions(const std::vector<Replica>& next, const std::set<int>& lost,
                                absl::Duration timeout);
  // ZeRO: every stage gathers the whole parameters (before evaluate, generate).
  absl::Status gather_parameters();

  int zero_stage() const { return config_.zero.stage; }

  // (config_ is at the job's current size: resize changes its batch split.)
  const TrainConfig configured_;  // as the job was started
  int resizes_ = 0;  // names made for new ranks (resize, spawn_replacement after a resize)
  int resized_ = 0;  // resize() calls that completed
  ResizeTimes last_resize_;
  std::vector<Replica> replicas_;
};

}  // namespace troupe::trainers
