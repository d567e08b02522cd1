// The hybrid trainer: a mesh of dp x pp pipeline stages (tensor parallelism
// comes next), each coordinate a stage, a parameter shard and a data loader
// in one placement bundle (docs/parallelism.md). Replica d's stages pass
// activations and gradients along their pipe group by their schedule
// (actors/pipeline/); the stages of pipeline stage p average their
// gradients over their data-parallel group (DDP). Each shard owns its
// stage's parameter range; the last stage computes the tied LM head with a
// copy of the first stage's wte.
//
// Not yet: ZeRO, tensor parallelism, the interleaved schedule, checkpoints,
// recovery and elasticity (the config refuses them with pp > 1).
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
  // shards of replica 0) rounded to the compute precision.
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
  // The index of coordinate (d, p) in mesh order.
  size_t index(int d, int p) const;
  // A whole model on the driver holding the trained weights (evaluate, generate).
  absl::StatusOr<nn::GPT> whole_model();

  Cluster& cluster_;
  TrainConfig config_;
  std::string job_;
  int threads_ = 0;
  std::vector<cluster::PlacementGroupId> placement_groups_;
  std::vector<ActorId> actors_;         // everything spawned, for stop()
  std::vector<MemberActors> members_;   // in mesh order
  std::vector<nn::ParamRange> ranges_;  // each pipeline stage's parameters
  std::optional<TrainerController> controller_;
  DataInfo data_info_;
  bool stopped_ = false;
};

}  // namespace troupe::trainers
