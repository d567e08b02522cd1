// The DDP trainer: dp replicas of the whole model, each a stage, a parameter
// shard and a data loader co-located in one placement-group bundle (one
// replica per node where the cluster has the nodes: SPREAD), gradients
// averaged over the replicas in buckets that overlap backward
// (docs/training.md).
//
//   auto trainer = DdpTrainer::start(*cluster, config, "run-1");
//   for (int64_t k = 1; k <= steps; ++k) auto outcome = (*trainer)->step(k);
//   auto accuracy = (*trainer)->evaluate(200);
//   (*trainer)->stop();
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "actors/data/data_loader_actor.h"
#include "core/cluster/cluster.h"
#include "trainers/config.h"
#include "trainers/trainer_controller.h"

namespace troupe::trainers {

// What the replicas' data looks like, from their loaders.
struct DataInfo {
  int64_t num_samples = 0;
  int64_t steps_per_epoch = 0;
};

// The loader options of replica `rank` of job `job` for `config`.
actors::LoaderOptions loader_options(const TrainConfig& config, const std::string& job, int rank);

class DdpTrainer {
 public:
  // Places and spawns the actors of every replica, forms the data-parallel
  // group, initialises the parameters (the same seed on every replica).
  // `threads`: compute threads per replica (0: the workers' default).
  // Errors: those of spawning (no room, a bad dataset named by the loader)
  // and of forming the group; what was spawned is stopped again.
  static absl::StatusOr<std::unique_ptr<DdpTrainer>> start(Cluster& cluster,
                                                           const TrainConfig& config,
                                                           const std::string& job, int threads);
  ~DdpTrainer();

  // Step `step` (from 1), all-or-nothing (trainer_controller.h).
  absl::StatusOr<StepOutcome> step(int64_t step) { return controller_->step(step); }
  // Task accuracy on held-out problems (synthetic tasks only; replica 0).
  absl::StatusOr<actors::EvalReport> evaluate(int samples);
  // Greedy or sampled continuation of `prompt` on replica 0.
  absl::StatusOr<std::vector<int32_t>> generate(std::vector<int32_t> prompt, int max_new_tokens,
                                                float temperature, uint64_t seed);
  // The fp32 master weights (replica 0's; every replica holds the same).
  absl::StatusOr<std::vector<float>> master_params();
  const DataInfo& data_info() const { return data_info_; }
  TrainerController& controller() { return *controller_; }
  // Kills the job's actors and removes its placement group.
  absl::Status stop();

 private:
  DdpTrainer(Cluster& cluster, TrainConfig config, std::string job)
      : cluster_(cluster), config_(std::move(config)), job_(std::move(job)) {}
  absl::Status spawn_replicas(int threads);

  Cluster& cluster_;
  TrainConfig config_;
  std::string job_;
  std::optional<cluster::PlacementGroupId> placement_group_;
  std::vector<ActorId> actors_;  // everything spawned, for stop()
  std::vector<Replica> replicas_;
  std::vector<ActorRef<actors::DataLoaderActor>> loaders_;
  std::optional<TrainerController> controller_;
  DataInfo data_info_;
  bool stopped_ = false;
};

}  // namespace troupe::trainers
