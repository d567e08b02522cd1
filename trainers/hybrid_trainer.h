// The hybrid trainer: a mesh dp x pp x tp, each coordinate a stage, a
// parameter shard and a data loader (docs/parallelism.md). The tp slices of
// a pipeline stage share one placement bundle (one node) and sum over their
// tp group inside each block; replica d's stages of slice t pass activations
// and gradients along their pipe group by their schedule (actors/pipeline/);
// the stages of (p, t) average their gradients over their data-parallel
// group: DDP, each shard owning its stage's parameter range of its slice's
// layout, or ZeRO-1 (Megatron's distributed optimizer), shard d owning
// partition d of that range (actors/distributed_optimizer_sync.h). The last
// stage computes a tied LM head with a copy of the first stage's embedding.
//
// With fault tolerance a lost coordinate's actors are restarted by the head
// in their bundle, placed again, and recovered as a lost DDP replica is
// (trainers/recovery.h): the survivors' groups - data-parallel, pipe and tp -
// formed again, the lost shards restored from the replica (d', p, t) of
// another data-parallel rank, under ZeRO-1 from the replica of its
// partition its buddy keeps, or (no copy survived, or dp 1) the job back at
// its latest checkpoint.
//
// Not yet: ZeRO-2/3 and elasticity with pp > 1 or tp > 1 (the config refuses
// them).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trainers/member_spawn.h"
#include "trainers/mesh_watch.h"
#include "trainers/recovery.h"
#include "trainers/trainer.h"

namespace troupe::trainers {

class HybridTrainer : public Trainer, public MeshRepair {
 public:
  // Places and spawns the actors of every coordinate, forms the groups,
  // initialises the parameters (the same seed everywhere, each shard its
  // range). InvalidArgument for a config it does not run; otherwise as
  // start_trainer.
  static absl::StatusOr<std::unique_ptr<HybridTrainer>> start(Cluster& cluster,
                                                              const TrainConfig& config,
                                                              const std::string& job, int threads);
  ~HybridTrainer() override;

  // On the driver, with the whole model's master weights (gathered from the
  // shards of replica 0, its slices put together) rounded to the compute
  // precision.
  absl::StatusOr<actors::EvalReport> evaluate(int samples) override;
  absl::StatusOr<std::vector<int32_t>> generate(std::vector<int32_t> prompt, int max_new_tokens,
                                                float temperature, uint64_t seed) override;
  absl::StatusOr<std::vector<float>> master_params() override;
  const DataInfo& data_info() const override { return data_info_; }
  TrainerController& controller() override { return *controller_; }
  std::string describe() const override;
  absl::Status stop() override;
  // Recovery (trainers/recovery.h), with fault_tolerance.enabled.
  MeshRepair* repair() override { return config_.fault_tolerance.enabled ? this : nullptr; }
  std::optional<HeadAway> head_away() const override { return watch_.head_away(); }
  absl::StatusOr<std::vector<LostMember>> find_lost(absl::Time deadline) override;
  absl::Status fence(const std::vector<LostMember>& hung) override;
  absl::Status await_replacements(const std::vector<LostMember>& lost,
                                  absl::Time deadline) override;
  // The collective groups of the mesh's stages: (p, t)'s data-parallel one,
  // (d, t)'s pipe group, (d, p)'s tp group; declares each of more than one
  // (again in recovery: the next generation).
  absl::Status declare_groups() override;
  void mark_whole() override;
  int64_t samples_per_epoch() const override { return data_info_.samples_per_epoch; }
  std::vector<ActorId> actors_at(const actors::Coordinate& at) const override;

 private:
  HybridTrainer(Cluster& cluster, TrainConfig config, std::string job, int threads)
      : cluster_(cluster), config_(std::move(config)), job_(std::move(job)), threads_(threads) {}
  absl::Status spawn_mesh();
  // The actors of coordinate `at`, in bundle `bundle` of placement group `pg`.
  absl::StatusOr<MemberActors> spawn_at(const actors::Coordinate& at, uint64_t pg, int bundle);
  // Recovery: the actors of `at` are unknown to a restarted head (their
  // node was lost while it was down): new ones take the coordinate, in a
  // placement group of their own, once a node has room (by `deadline`).
  absl::Status respawn(const actors::Coordinate& at, absl::Time deadline);
  std::string dp_group(int p, int t) const;
  std::string pipe_group(int d, int t) const;
  std::string tp_group(int d, int p) const;
  actors::Mesh mesh() const;
  std::vector<actors::Coordinate> coordinates() const;  // in mesh order
  // What the shard at `at` owns: its stage's range, under ZeRO-1 partition d
  // of it.
  nn::ParamRange owned(const actors::Coordinate& at) const;
  // ZeRO-1 with fault tolerance: a partition exists once, so the shard of
  // the next replica (d + 1 mod dp, on another node) keeps a replica of it
  // (docs/fault_tolerance.md); -1: none.
  int buddy_of(const actors::Coordinate& at) const;
  // The index of coordinate (d, p, t) in mesh order.
  size_t index(int d, int p, int t = 0) const;
  // A whole model on the driver holding the trained weights (evaluate, generate).
  absl::StatusOr<std::unique_ptr<nn::Model>> whole_model();

  Cluster& cluster_;
  TrainConfig config_;
  std::string job_;
  int threads_ = 0;
  std::vector<cluster::PlacementGroupId> placement_groups_;
  std::vector<ActorId> actors_;         // everything spawned, for stop()
  std::vector<MemberActors> members_;   // in mesh order
  std::vector<nn::ParamRange> ranges_;  // each pipeline stage's parameters (of any slice)
  std::optional<TrainerController> controller_;
  DataInfo data_info_;
  bool stopped_ = false;
  MeshWatch watch_{cluster_, job_, [this](const actors::Coordinate& at) { return actors_at(at); }};
};

}  // namespace troupe::trainers
