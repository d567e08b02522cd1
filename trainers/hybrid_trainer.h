// The hybrid trainer: a mesh dp x pp x tp, each coordinate a stage, a
// parameter shard and a data loader (docs/parallelism.md). The tp slices of
// a pipeline stage share one placement bundle (one node) and sum over their
// tp group inside each block; replica d's stages of slice t pass activations
// and gradients along their pipe group by their schedule (actors/pipeline/);
// the stages of (p, t) average their gradients over their data-parallel
// group (DDP). Each shard owns its stage's parameter range of its slice's
// layout; the last stage computes the tied LM head with a copy of the first
// stage's wte.
//
// Not yet: ZeRO, the interleaved schedule, recovery and elasticity (the
// config refuses them with pp > 1 or tp > 1).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trainers/member_spawn.h"
#include "trainers/trainer.h"

namespace troupe::trainers {

class HybridTrainer : public Trainer {
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

 private:
  HybridTrainer(Cluster& cluster, TrainConfig config, std::string job, int threads)
      : cluster_(cluster), config_(std::move(config)), job_(std::move(job)), threads_(threads) {}
  absl::Status spawn_mesh();
  // The collective groups of the mesh's stages: (p, t)'s data-parallel one,
  // (d, t)'s pipe group, (d, p)'s tp group; declares each of more than one.
  std::string dp_group(int p, int t) const;
  std::string pipe_group(int d, int t) const;
  std::string tp_group(int d, int p) const;
  absl::Status declare_groups();
  actors::Mesh mesh() const;
  // The index of coordinate (d, p, t) in mesh order.
  size_t index(int d, int p, int t = 0) const;
  // A whole model on the driver holding the trained weights (evaluate, generate).
  absl::StatusOr<nn::GPT> whole_model();

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
};

}  // namespace troupe::trainers
