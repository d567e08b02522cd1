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
#include "trainers/mesh_trainer.h"

namespace troupe::trainers {

class HybridTrainer : public MeshTrainer {
 public:
  // Places and spawns the actors of every coordinate, forms the groups,
  // initialises the parameters (the same seed everywhere, each shard its
  // range). InvalidArgument for a config it does not run; otherwise as
  // start_trainer.
  static absl::StatusOr<std::unique_ptr<HybridTrainer>> start(Cluster& cluster,
                                                              const TrainConfig& config,
                                                              const std::string& job, int threads);

  // On the driver, with the whole model's master weights (gathered from the
  // shards of replica 0, its slices put together) rounded to the compute
  // precision.
  absl::StatusOr<actors::EvalReport> evaluate(int samples) override;
  absl::StatusOr<actors::ValidationResult> validate() override;
  absl::StatusOr<std::vector<int32_t>> generate(std::vector<int32_t> prompt, int max_new_tokens,
                                                float temperature, uint64_t seed) override;
  absl::StatusOr<std::vector<float>> master_params() override;
  std::string describe() const override;

 private:
  HybridTrainer(Cluster& cluster, TrainConfig config, std::string job, int threads)
      : MeshTrainer(cluster, std::move(config), std::move(job), threads) {}
  absl::Status spawn_mesh();
  // The actors of coordinate `at`, in bundle `bundle` of placement group `pg`.
  absl::StatusOr<MemberActors> spawn_at(const actors::Coordinate& at, cluster::PlacementGroupId pg,
                                        int bundle);
  // dp x pp x tp, where interleaved 1F1B's chunks of a stage are virtual
  // stages of their own: pp x virtual_stages of them.
  actors::Mesh mesh() const override;
  const MemberActors& member_at(const actors::Coordinate& at) const override {
    return members_[index(at.d, at.p, at.t)];
  }
  nn::ParamRange stage_params(int p) const override { return ranges_[static_cast<size_t>(p)]; }
  // Recovery: the actors of `at`, in a placement group of their own.
  absl::StatusOr<MemberActors> spawn_replacement(const actors::Coordinate& at,
                                                 cluster::PlacementGroupId pg) override;
  std::string replacement_group(const actors::Coordinate& at) const override;
  // The index of coordinate (d, p, t) in mesh order.
  size_t index(int d, int p, int t = 0) const;
  // A whole model on the driver holding the trained weights (evaluate, generate).
  absl::StatusOr<std::unique_ptr<nn::Model>> whole_model();

  std::vector<MemberActors> members_;   // in mesh order
  std::vector<nn::ParamRange> ranges_;  // each pipeline stage's parameters (of any slice)
};

}  // namespace troupe::trainers
