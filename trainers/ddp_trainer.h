// The DDP trainer: dp replicas of the whole model, each a stage, a parameter
// shard (owning the whole stage) and a data loader co-located in one
// placement-group bundle (one replica per node where the cluster has the
// nodes: SPREAD), gradients averaged over the replicas in buckets that
// overlap backward (actors/allreduce_gradient_sync.h, docs/training.md).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "actors/param_shard_actor.h"
#include "trainers/trainer.h"

namespace troupe::trainers {

class DdpTrainer : public Trainer {
 public:
  // Places and spawns the actors of every replica, forms the data-parallel
  // group, initialises the parameters (the same seed on every replica).
  // InvalidArgument for a config DDP does not run (ZeRO stage > 0, pp or
  // tp > 1); otherwise as start_trainer.
  static absl::StatusOr<std::unique_ptr<DdpTrainer>> start(Cluster& cluster,
                                                           const TrainConfig& config,
                                                           const std::string& job, int threads);
  ~DdpTrainer() override;

  // On replica 0 (every replica holds the same weights).
  absl::StatusOr<actors::EvalReport> evaluate(int samples) override;
  absl::StatusOr<std::vector<int32_t>> generate(std::vector<int32_t> prompt, int max_new_tokens,
                                                float temperature, uint64_t seed) override;
  absl::StatusOr<std::vector<float>> master_params() override;
  const DataInfo& data_info() const override { return data_info_; }
  TrainerController& controller() override { return *controller_; }
  std::string describe() const override;
  absl::Status stop() override;

 private:
  struct Replica {
    ActorRef<actors::PipelineStageActor> stage;
    ActorRef<actors::ParamShardActor> shard;
    ActorRef<actors::DataLoaderActor> loader;
  };

  DdpTrainer(Cluster& cluster, TrainConfig config, std::string job)
      : cluster_(cluster), config_(std::move(config)), job_(std::move(job)) {}
  absl::Status spawn_replicas(int threads);
  absl::Status spawn_replica(int d, cluster::PlacementGroupId group, int threads);

  Cluster& cluster_;
  TrainConfig config_;
  std::string job_;
  std::optional<cluster::PlacementGroupId> placement_group_;
  std::vector<ActorId> actors_;  // everything spawned, for stop()
  std::vector<Replica> replicas_;
  std::optional<TrainerController> controller_;
  DataInfo data_info_;
  bool stopped_ = false;
};

}  // namespace troupe::trainers
