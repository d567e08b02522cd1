// Elasticity on a real local cluster (a head and three worker processes of
// the troupe executable): a DDP job resized between steps - a rank added,
// a rank in the middle taken away - trains on the same samples each step as
// a job that never changed, and its losses and weights match one replica on
// the same global batch (fp32, relative 1e-6, SGD). ZeRO-1/2/3 jobs too,
// their partitions moving peer to peer. A size the batch rule refuses
// changes nothing, and training goes on; so does a ZeRO-2/3 resize to dp 1,
// which is not built.
#include <gtest/gtest.h>

#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/manifest.h"
#include "tests/trainers/training_cluster.h"
#include "trainers/checkpointer.h"
#include "trainers/config.h"
#include "trainers/data_parallel_trainer.h"

namespace troupe::trainers {
namespace {

constexpr int kGlobalBatch = 12;
constexpr absl::Duration kResizeWait = absl::Seconds(60);

TrainConfig config_for(int dp) {
  return testing::elastic_sgd_config(dp, kGlobalBatch);
}

using testing::RunResult;
using testing::sorted;

class ElasticTest : public testing::TrainingClusterTest {
 protected:
  std::unique_ptr<DataParallelTrainer> start(const TrainConfig& config) {
    auto trainer =
        DataParallelTrainer::start(*driver_, config, "elastic-test-" + std::to_string(++jobs_), 1);
    EXPECT_TRUE(trainer.ok()) << trainer.status();
    return trainer.ok() ? *std::move(trainer) : nullptr;
  }
  // Steps [from, to] into `result`.
  static void train(DataParallelTrainer& trainer, int from, int to, RunResult& result) {
    for (int k = from; k <= to; ++k) {
      absl::StatusOr<StepOutcome> outcome = trainer.step(k);
      ASSERT_TRUE(outcome.ok()) << "step " << k << ": " << outcome.status();
      EXPECT_EQ(outcome->samples, kGlobalBatch);
      result.losses.push_back(outcome->loss);
      result.norms.push_back(outcome->grad_norm);
      result.outcomes.push_back(*outcome);
    }
  }
  static void finish(DataParallelTrainer& trainer, RunResult& result) {
    absl::StatusOr<std::vector<float>> params = trainer.master_params();
    ASSERT_TRUE(params.ok()) << params.status();
    result.params = *std::move(params);
    EXPECT_TRUE(trainer.stop().ok());
  }

  // A checkpoint records the mesh the job has now, each part saved as the
  // coordinate its owner has now (not the one it was spawned at).
  static void expect_checkpoint_of(DataParallelTrainer& trainer, int dp) {
    char dir[] = "/tmp/troupe-elastic-ckpt-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    Checkpointer checkpoints(trainer.controller(),
                             job_record(config_for(2), trainer.data_info().samples_per_epoch),
                             {.dir = dir, .interval_steps = 0, .keep = 1, .async = false});
    std::vector<CheckpointEvent> saved = checkpoints.save_now();
    ASSERT_FALSE(saved.empty());
    ASSERT_TRUE(saved.back().status.ok()) << saved.back().status;
    std::ifstream file(saved.back().step_dir + "/" + checkpoint::kManifestFile);
    std::stringstream text;
    text << file.rdbuf();
    absl::StatusOr<checkpoint::Manifest> manifest =
        checkpoint::decode_manifest(text.str(), saved.back().step_dir);
    ASSERT_TRUE(manifest.ok()) << manifest.status();
    EXPECT_EQ(manifest->layout.dp, dp);
    std::set<int> owners;
    for (const checkpoint::ShardRecord& shard : manifest->shards)
      owners.insert(shard.owner.d);
    EXPECT_EQ(owners.size(), manifest->shards.size()) << "two parts saved as one owner";
    EXPECT_LT(*owners.rbegin(), dp);
    std::filesystem::remove_all(dir);
  }

  inline static int jobs_ = 0;
};

TEST_F(ElasticTest, AJobResizedBetweenStepsTrainsAsOneThatNeverChanged) {
  RunResult single;
  {
    auto trainer = start(config_for(1));
    ASSERT_NE(trainer, nullptr);
    train(*trainer, 1, 6, single);
    finish(*trainer, single);
  }
  RunResult elastic;
  auto trainer = start(config_for(2));
  ASSERT_NE(trainer, nullptr);
  train(*trainer, 1, 2, elastic);
  // dp 2 -> 3: a rank joins (micro-batch 4 now).
  ASSERT_TRUE(trainer->resize({0, 1}, {-1}, absl::Now() + kResizeWait).ok());
  EXPECT_EQ(trainer->controller().mesh().dp, 3);
  EXPECT_EQ(trainer->describe(), "DDP over 3 replicas");
  train(*trainer, 3, 4, elastic);
  expect_checkpoint_of(*trainer, 3);
  // dp 3 -> 2: the rank in the middle leaves; the others close ranks.
  ASSERT_TRUE(trainer->resize({0, 2}, {}, absl::Now() + kResizeWait).ok());
  EXPECT_EQ(trainer->controller().mesh().dp, 2);
  train(*trainer, 5, 6, elastic);
  expect_checkpoint_of(*trainer, 2);  // rank 2 saves as d1 now
  finish(*trainer, elastic);

  ASSERT_EQ(elastic.outcomes.size(), single.outcomes.size());
  const int dps[6] = {2, 2, 3, 3, 2, 2};
  for (size_t k = 0; k < single.outcomes.size(); ++k) {
    EXPECT_EQ(elastic.outcomes[k].dp, dps[k]) << "step " << k + 1;
    EXPECT_EQ(sorted(elastic.outcomes[k].sample_ids), sorted(single.outcomes[k].sample_ids))
        << "step " << k + 1 << " trained on other samples";
  }
  testing::expect_same_training(elastic, single, "sgd, dp 2 -> 3 -> 2", true, "elastic");
}

TEST_F(ElasticTest, ASizeTheBatchRuleRefusesChangesNothing) {
  TrainConfig config = config_for(2);
  config.elasticity.micro_batch_sizes = {6};  // 12 = 2 x 6 only
  auto trainer = start(config);
  ASSERT_NE(trainer, nullptr);
  RunResult run;
  train(*trainer, 1, 1, run);
  absl::Status refused = trainer->resize({0, 1}, {-1}, absl::Now() + kResizeWait);
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
  EXPECT_TRUE(absl::StrContains(refused.message(), "the global batch 12 cannot be split over dp 3"))
      << refused;
  EXPECT_EQ(trainer->controller().mesh().dp, 2);
  train(*trainer, 2, 3, run);  // goes on at dp 2
  EXPECT_EQ(trainer->resize({0, 0}, {}, absl::Now()).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(trainer->stop().ok());
}

// ZeRO: the partitions move peer to peer with every change of size, and
// the job trains as one replica would (2 -> 3 -> 2, a middle rank leaving).
class ElasticZeroTest : public ElasticTest, public ::testing::WithParamInterface<int> {};

TEST_P(ElasticZeroTest, PartitionsMoveAndTheJobTrainsAsOneThatNeverChanged) {
  const int stage = GetParam();
  RunResult single;
  {
    auto trainer = start(config_for(1));
    ASSERT_NE(trainer, nullptr);
    train(*trainer, 1, 6, single);
    finish(*trainer, single);
  }
  TrainConfig config = config_for(2);
  config.zero.stage = stage;
  auto trainer = start(config);
  ASSERT_NE(trainer, nullptr);
  ASSERT_NE(trainer->elastic(), nullptr);
  RunResult elastic;
  train(*trainer, 1, 2, elastic);
  absl::StatusOr<std::vector<float>> before = trainer->master_params();
  ASSERT_TRUE(before.ok()) << before.status();
  ASSERT_TRUE(trainer->resize({0, 1}, {-1}, absl::Now() + kResizeWait).ok());
  EXPECT_EQ(trainer->describe(), absl::StrCat("ZeRO-", stage, " over 3 ranks"));
  // The masters as they were, now in three partitions.
  absl::StatusOr<std::vector<float>> after = trainer->master_params();
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_TRUE(*before == *after) << "the masters changed moving";
  train(*trainer, 3, 4, elastic);
  ASSERT_TRUE(trainer->resize({0, 2}, {}, absl::Now() + kResizeWait).ok());
  train(*trainer, 5, 6, elastic);
  expect_checkpoint_of(*trainer, 2);
  if (stage >= 2) {
    // At dp 1 the model holds what ZeRO-2/3 partition: refused, nothing changed.
    absl::Status refused = trainer->resize({0}, {}, absl::Now() + kResizeWait);
    EXPECT_EQ(refused.code(), absl::StatusCode::kUnimplemented) << refused;
    EXPECT_EQ(trainer->controller().mesh().dp, 2);
  }
  finish(*trainer, elastic);
  for (size_t k = 0; k < single.outcomes.size(); ++k) {
    EXPECT_EQ(sorted(elastic.outcomes[k].sample_ids), sorted(single.outcomes[k].sample_ids))
        << "step " << k + 1;
  }
  testing::expect_same_training(
      elastic, single, absl::StrCat("sgd, ZeRO-", stage, ", dp 2 -> 3 -> 2"), true, "elastic");
}

INSTANTIATE_TEST_SUITE_P(Stages, ElasticZeroTest, ::testing::Values(1, 2, 3),
                         [](const ::testing::TestParamInfo<int>& stage) {
                           return absl::StrCat("Zero", stage.param);
                         });

}  // namespace
}  // namespace troupe::trainers
