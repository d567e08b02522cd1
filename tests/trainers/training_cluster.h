// What the trainer tests on a real local cluster share: a head and three
// worker processes of the troupe executable for the whole suite, this test
// process as the driver, and the comparison of two runs' losses and weights.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/cluster/cluster.h"
#include "core/cluster/local_cluster.h"
#include "nn/model/model.h"
#include "trainers/checkpointer.h"
#include "trainers/config.h"
#include "trainers/trainer.h"
#include "trainers/trainer_controller.h"

namespace troupe::trainers::testing {

// The GPT the trainer tests train: two blocks of 32 channels, 16 tokens.
inline constexpr nn::ModelConfig kTinyGpt = nn::GPTConfig{.max_seq_len = 16,
                                                          .vocab_size = 256,
                                                          .padded_vocab_size = 256,
                                                          .num_layers = 2,
                                                          .num_heads = 2,
                                                          .channels = 32};

// The elastic tests' job: the tiny GPT on 2-digit addition, SGD with
// momentum, elasticity enabled, `global_batch` samples a step split evenly
// over `dp` ranks (one micro-batch each).
inline TrainConfig elastic_sgd_config(int dp, int global_batch) {
  TrainConfig c;
  c.parallel.dp = dp;
  c.gradient_accumulation_steps = 1;
  c.micro_batch_size = global_batch / dp;
  c.train_batch_size = global_batch;
  c.model = kTinyGpt;
  c.data.synthetic =
      SyntheticTaskConfig{.task = "addition", .digits = 2, .num_samples = 600, .seed = 7};
  c.optimizer.type = OptimizerType::kSgd;
  c.optimizer.sgd = {.lr = 0.1f, .momentum = 0.9f, .weight_decay = 0.01f};
  c.lr_schedule = nn::LrSchedule::constant(0.1f);
  c.gradient_clipping = 1.0;
  c.zero.reduce_bucket_size = 4096;
  c.training.seed = 11;
  c.elasticity.enabled = true;
  return c;
}

// What the ZeRO and pipeline tests train with: 2-digit addition, `optimizer`
// (SGD with momentum, or AdamW) at a constant rate, clipping at 1.
inline void train_addition(TrainConfig& c, OptimizerType optimizer) {
  c.data.synthetic =
      SyntheticTaskConfig{.task = "addition", .digits = 2, .num_samples = 600, .seed = 7};
  c.optimizer.type = optimizer;
  c.optimizer.adamw = {
      .lr = 3e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
  c.optimizer.sgd = {.lr = 0.1f, .momentum = 0.9f, .weight_decay = 0.01f};
  c.lr_schedule = nn::LrSchedule::constant(optimizer == OptimizerType::kAdamW ? 3e-3f : 0.1f);
  c.gradient_clipping = 1.0;
}

// A step's sample ids in order, to compare the samples of two runs' steps.
inline std::vector<int64_t> sorted(std::vector<int64_t> ids) {
  std::sort(ids.begin(), ids.end());
  return ids;
}

class TrainingClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { start_cluster("CPU=2"); }
  // Three workers, each offering `resources` (a suite whose bundles need
  // more hides SetUpTestSuite with its own), and seeing the GPUs
  // `visible_devices` names (CUDA_VISIBLE_DEVICES, by worker). The troupe
  // executable is $TROUPE_BINARY where set (a bundle run on another
  // machine: scripts/gpu_check.sh), else the build's.
  static void start_cluster(const std::string& resources,
                            std::vector<std::string> visible_devices = {}) {
    const char* binary = std::getenv("TROUPE_BINARY");
    auto local = cluster::LocalCluster::start(
        {.workers = 3,
         .default_resources = resources,
         .worker_visible_devices = std::move(visible_devices),
         .troupe_binary = binary != nullptr && *binary != '\0' ? binary : TROUPE_BINARY,
         .echo_output = false});
    ASSERT_TRUE(local.ok()) << local.status();
    local_ = local->release();
    auto driver = Cluster::connect(local_->client_options());
    ASSERT_TRUE(driver.ok()) << driver.status();
    driver_ = driver->release();
  }
  static void TearDownTestSuite() {
    delete driver_;
    delete local_;
  }

  inline static cluster::LocalCluster* local_ = nullptr;
  inline static Cluster* driver_ = nullptr;
};

// What a run gave, step by step, and its weights at the end.
struct RunResult {
  std::vector<double> losses;
  std::vector<double> norms;
  std::vector<float> params;
  std::vector<StepOutcome> outcomes;
};

// Runs steps 1..steps of `config` on a trainer of its own (start_trainer), each expected to be
// applied with `samples` samples, and returns its losses, norms, outcomes and final weights.
inline RunResult run_steps(Cluster& driver, const TrainConfig& config, const std::string& job,
                           int steps, int64_t samples) {
  RunResult result;
  auto trainer = start_trainer(driver, config, job, 1);
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  if (!trainer.ok()) return result;
  for (int k = 1; k <= steps; ++k) {
    auto outcome = (*trainer)->step(k);
    EXPECT_TRUE(outcome.ok()) << outcome.status();
    if (!outcome.ok()) return result;
    EXPECT_TRUE(outcome->applied);
    EXPECT_EQ(outcome->samples, samples);
    result.losses.push_back(outcome->loss);
    result.norms.push_back(outcome->grad_norm);
    result.outcomes.push_back(*outcome);
  }
  auto params = (*trainer)->master_params();
  EXPECT_TRUE(params.ok()) << params.status();
  if (params.ok()) result.params = *std::move(params);
  EXPECT_TRUE((*trainer)->stop().ok());
  return result;
}

// Runs steps [from, to] of `config` on a trainer of its own (start_trainer:
// the data-parallel or the hybrid one), first loading the newest checkpoint
// in config.checkpoint.dir when `load` (it must be of step from - 1), and
// saving one after every step in `save_at`. The newer checkpoints a load
// passed over go to `skipped`.
inline RunResult run_checkpointed(Cluster& driver, const TrainConfig& config,
                                  const std::string& job, int from, int to,
                                  const std::vector<int64_t>& save_at = {}, bool load = false,
                                  std::vector<std::string>* skipped = nullptr) {
  RunResult result;
  auto trainer = start_trainer(driver, config, job, 1);
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  if (!trainer.ok()) return result;
  Checkpointer checkpoints((*trainer)->controller(),
                           job_record(config, (*trainer)->data_info().samples_per_epoch),
                           config.checkpoint);
  if (load) {
    absl::StatusOr<LoadedCheckpoint> loaded = checkpoints.load();
    EXPECT_TRUE(loaded.ok()) << loaded.status();
    if (!loaded.ok()) return result;
    EXPECT_EQ(loaded->step, from - 1);
    if (skipped != nullptr) *skipped = loaded->skipped;
  }
  EXPECT_EQ((*trainer)->controller().next_step(), from);
  for (int k = from; k <= to; ++k) {
    auto outcome = (*trainer)->step(k);
    EXPECT_TRUE(outcome.ok()) << outcome.status();
    if (!outcome.ok()) return result;
    result.losses.push_back(outcome->loss);
    result.norms.push_back(outcome->grad_norm);
    result.outcomes.push_back(*outcome);
    if (std::find(save_at.begin(), save_at.end(), k) != save_at.end()) {
      const CheckpointEvent saved = checkpoints.save_now().back();
      EXPECT_TRUE(saved.status.ok()) << saved.status;
      EXPECT_EQ(saved.step, k);
    }
  }
  for (const CheckpointEvent& e : checkpoints.finish())
    EXPECT_TRUE(e.status.ok()) << e.status;
  auto params = (*trainer)->master_params();
  EXPECT_TRUE(params.ok()) << params.status();
  if (params.ok()) result.params = *std::move(params);
  EXPECT_TRUE((*trainer)->stop().ok());
  return result;
}

// max |a - b| / max |b| over the vector.
inline double relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::abs(static_cast<double>(b[i])));
  }
  return diff / scale;
}

// Losses (relative 1e-6) and gradient norms (1e-5) at every step, and the
// weights at the end (1e-6) when `compare_weights`; the weights' difference
// is printed, under `tag`, either way.
inline void expect_same_training(const RunResult& run, const RunResult& single,
                                 const std::string& what, bool compare_weights, const char* tag) {
  ASSERT_EQ(run.losses.size(), single.losses.size()) << what;
  ASSERT_EQ(run.params.size(), single.params.size()) << what;
  for (size_t k = 0; k < single.losses.size(); ++k) {
    EXPECT_NEAR(run.losses[k], single.losses[k], 1e-6 * std::abs(single.losses[k]))
        << what << ", step " << k + 1;
    EXPECT_NEAR(run.norms[k], single.norms[k], 1e-5 * single.norms[k])
        << what << ", step " << k + 1;
  }
  const double weights = relative_difference(run.params, single.params);
  std::printf("[ %s ] %s: weights relative difference %.2e after %zu steps\n", tag, what.c_str(),
              weights, single.losses.size());
  if (compare_weights) {
    EXPECT_LE(weights, 1e-6) << what << ": weights differ";
  }
}

}  // namespace troupe::trainers::testing
