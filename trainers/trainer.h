// Trainer: a training job's actors on a cluster, built for one kind of
// parallelism, and driven step by step through its TrainerController. This
// is what `troupe train` uses; each parallelism is an implementation in its
// own files: DataParallelTrainer (DDP, ZeRO-1/2/3) and HybridTrainer
// (dp x pp x tp: pipelines and tensor-parallel slices).
//
//   auto trainer = start_trainer(*cluster, config, "run-1", threads);
//   for (int64_t k = 1; k <= steps; ++k) auto outcome = (*trainer)->step(k);
//   auto accuracy = (*trainer)->evaluate(200);
//   (*trainer)->stop();
//
// A trainer spawns, per mesh coordinate, a stage, a parameter shard and a
// data loader in one placement-group bundle (docs/training.md), hands the
// controller a MeshMember for each, and kills them again in stop() (or its
// destructor).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "actors/data/data_loader_actor.h"
#include "actors/pipeline_stage_actor.h"
#include "actors/validation.h"
#include "core/cluster/cluster.h"
#include "trainers/config.h"
#include "trainers/elastic_scaler.h"
#include "trainers/recovery.h"
#include "trainers/trainer_controller.h"

namespace troupe::trainers {

// What the replicas' data looks like, from their loaders.
struct DataInfo {
  int64_t num_samples = 0;
  int64_t steps_per_epoch = 0;
  int64_t samples_per_epoch = 0;
};

class Trainer {
 public:
  virtual ~Trainer() = default;

  // Step `step` (from 1), all-or-nothing (trainer_controller.h).
  absl::StatusOr<StepOutcome> step(int64_t step) { return controller().step(step); }
  // Task accuracy on held-out problems (synthetic tasks only).
  virtual absl::StatusOr<actors::EvalReport> evaluate(int samples) = 0;
  // The loss and bits per byte over the validation dataset (config data.val_path), each window
  // counted once over the data-parallel ranks. FailedPrecondition without a data.val_path.
  virtual absl::StatusOr<actors::ValidationResult> validate() = 0;
  // Greedy or sampled continuation of `prompt`.
  virtual absl::StatusOr<std::vector<int32_t>> generate(std::vector<int32_t> prompt,
                                                        int max_new_tokens, float temperature,
                                                        uint64_t seed) = 0;
  // The fp32 master weights of the whole model, in nn's flat layout.
  virtual absl::StatusOr<std::vector<float>> master_params() = 0;
  virtual const DataInfo& data_info() const = 0;
  virtual TrainerController& controller() = 0;
  // What recovery from a lost worker needs of the trainer (trainers/
  // recovery.h); null when it cannot recover.
  virtual MeshRepair* repair() { return nullptr; }
  // What elasticity needs of the trainer (trainers/elastic_scaler.h); null
  // when the job does not change its size.
  virtual ElasticMesh* elastic() { return nullptr; }
  // How the job is laid out, for people: "DDP over 2 replicas".
  virtual std::string describe() const = 0;
  // Kills the job's actors and removes its placement group. Idempotent.
  virtual absl::Status stop() = 0;
};

// Starts the trainer `config` asks for (its `parallel` and
// `zero_optimization` sections): the data-parallel one (DDP, ZeRO) for
// pp = tp = 1, the hybrid one (trainers/hybrid_trainer.h) otherwise. `threads`: compute threads per
// stage (0: the workers' default). Errors: those of the trainer's start (no
// room, a bad dataset named by the loader, forming the groups); what was
// spawned is stopped again.
absl::StatusOr<std::unique_ptr<Trainer>> start_trainer(Cluster& cluster, const TrainConfig& config,
                                                       const std::string& job, int threads);

// What every trainer derives from the config the same way.
// The loader options of data-parallel rank `rank` of job `job`.
actors::LoaderOptions loader_options(const TrainConfig& config, const std::string& job, int rank);
actors::OptimizerSpec optimizer_spec(const OptimizerConfig& optimizer);
// The precision of the stages' compute copies: fp16, bf16 or fp32.
nn::DType compute_precision(const TrainConfig& config);
// The schedule, clipping and loss scaling the controller applies.
ControllerOptions controller_options(const TrainConfig& config);
// What evaluate(samples) asks of the model: held-out problems of the
// config's synthetic task. FailedPrecondition without one.
absl::StatusOr<actors::EvalRequest> eval_request(const TrainConfig& config, int samples);
// The validation dataset, opened: FailedPrecondition without data.val_path; TokenDataset::open's
// errors.
absl::StatusOr<actors::TokenDataset> validation_dataset(const TrainConfig& config);
// What validate() asks of data-parallel rank `rank` of `world`; the windows eval_iters allows.
actors::ValidationRequest validation_request(const TrainConfig& config, int rank, int world);

}  // namespace troupe::trainers
