// Elasticity driven by the cluster (trainers/elastic_scaler.h), on a real
// local cluster of troupe processes of its own: a DDP job at dp 2 grows to
// 3 when a worker joins, shrinks to 2 when a node is drained (`troupe drain`
// then finds the node empty), and to 1 when a worker is SIGKILLed, running
// the failed step again. Every step trains on the samples of a run that
// never changed, and losses and weights match one replica on the same
// global batch (fp32, relative 1e-6, SGD). A ZeRO-3 job too, its
// partitions moving at each change (a lost rank's from the replica the next
// rank keeps). With fault tolerance, a lost rank of a resized job is
// replaced at its shape now (DDP and ZeRO-3). A join that cannot keep the
// global batch is refused with the reason, and training goes on.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tests/trainers/training_cluster.h"
#include "trainers/config.h"
#include "trainers/data_parallel_trainer.h"
#include "trainers/elastic_scaler.h"
#include "trainers/recovery.h"

namespace troupe::trainers {
namespace {

constexpr int kGlobalBatch = 12;
// How long the driver may take to hear of a node that joined or drains.
constexpr absl::Duration kNoticeWait = absl::Seconds(30);

TrainConfig config_for(int dp) {
  return testing::elastic_sgd_config(dp, kGlobalBatch);
}

using testing::RunResult;
using testing::sorted;

class ElasticScalerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto local = cluster::LocalCluster::start({.workers = 2,
                                               .default_resources = "CPU=2",
                                               .troupe_binary = TROUPE_BINARY,
                                               .echo_output = false});
    ASSERT_TRUE(local.ok()) << local.status();
    local_ = *std::move(local);
    auto driver = Cluster::connect(local_->client_options());
    ASSERT_TRUE(driver.ok()) << driver.status();
    driver_ = *std::move(driver);
  }

  std::unique_ptr<DataParallelTrainer> start(const TrainConfig& config, const std::string& job) {
    auto trainer = DataParallelTrainer::start(*driver_, config, job, 1);
    EXPECT_TRUE(trainer.ok()) << trainer.status();
    return trainer.ok() ? *std::move(trainer) : nullptr;
  }
  // Step k into `result`, which must succeed.
  static void train(DataParallelTrainer& trainer, int k, RunResult& result) {
    absl::StatusOr<StepOutcome> outcome = trainer.step(k);
    ASSERT_TRUE(outcome.ok()) << "step " << k << ": " << outcome.status();
    EXPECT_EQ(outcome->samples, kGlobalBatch);
    result.losses.push_back(outcome->loss);
    result.norms.push_back(outcome->grad_norm);
    result.outcomes.push_back(*outcome);
  }
  static void finish(DataParallelTrainer& trainer, RunResult& result) {
    absl::StatusOr<std::vector<float>> params = trainer.master_params();
    ASSERT_TRUE(params.ok()) << params.status();
    result.params = *std::move(params);
    EXPECT_TRUE(trainer.stop().ok());
  }
  // `steps` steps of one replica on the same global batch: what an elastic
  // run must match.
  RunResult single_run(int steps, const std::string& job) {
    RunResult single;
    auto trainer = start(config_for(1), job);
    EXPECT_NE(trainer, nullptr);
    if (trainer == nullptr) return single;
    for (int k = 1; k <= steps; ++k)
      train(*trainer, k, single);
    finish(*trainer, single);
    return single;
  }
  // Asks the scaler before step `step` until it resizes (the driver hears
  // of a change with a heartbeat), for at most kNoticeWait.
  static std::optional<ResizeReport> resize_before(ElasticScaler& scaler, int64_t step) {
    const absl::Time until = absl::Now() + kNoticeWait;
    while (absl::Now() < until) {
      absl::StatusOr<std::optional<ResizeReport>> r = scaler.before_step(step);
      EXPECT_TRUE(r.ok()) << r.status();
      if (!r.ok()) return std::nullopt;
      if (*r) return *r;
      absl::SleepFor(absl::Milliseconds(50));
    }
    return std::nullopt;
  }
  // The worker (LocalCluster's position) whose node is `node`.
  int worker_of(uint32_t node) const {
    for (int i = 0; i < local_->num_workers(); ++i) {
      if (local_->worker_node(i) == node) return i;
    }
    return -1;
  }
  std::vector<std::optional<uint32_t>> rank_nodes(DataParallelTrainer& trainer) {
    absl::StatusOr<cluster::ClusterStatus> status = driver_->status();
    EXPECT_TRUE(status.ok()) << status.status();
    return status.ok() ? trainer.rank_nodes(*status) : std::vector<std::optional<uint32_t>>{};
  }

  void replaces_a_lost_rank_at_its_shape_now(int zero_stage);
  // Step k of `elastic` ran at dp dps[k], on the samples of the same step of
  // `single`, and the two trained alike (`what`, `label`).
  static void expect_same_steps(const RunResult& elastic, const RunResult& single,
                                const std::vector<int>& dps, const std::string& what,
                                const char* label) {
    ASSERT_EQ(elastic.outcomes.size(), single.outcomes.size());
    ASSERT_EQ(dps.size(), single.outcomes.size());
    for (size_t k = 0; k < single.outcomes.size(); ++k) {
      EXPECT_EQ(elastic.outcomes[k].dp, dps[k]) << "step " << k + 1;
      EXPECT_EQ(sorted(elastic.outcomes[k].sample_ids), sorted(single.outcomes[k].sample_ids))
          << "step " << k + 1 << " trained on other samples";
    }
    testing::expect_same_training(elastic, single, what, true, label);
  }

  std::unique_ptr<cluster::LocalCluster> local_;
  std::unique_ptr<Cluster> driver_;
};

TEST_F(ElasticScalerTest, AJobGrowsOnAJoinAndShrinksOnADrainAndALoss) {
  constexpr int kSteps = 8;
  const RunResult single = single_run(kSteps, "scaler-single");
  ASSERT_EQ(single.outcomes.size(), static_cast<size_t>(kSteps));

  const TrainConfig config = config_for(2);
  auto trainer = start(config, "scaler-elastic");
  ASSERT_NE(trainer, nullptr);
  ASSERT_NE(trainer->elastic(), nullptr);
  ElasticScaler scaler(*driver_, *trainer, config);
  RunResult elastic;
  for (int k = 1; k <= 2; ++k) {
    absl::StatusOr<std::optional<ResizeReport>> none = scaler.before_step(k);
    ASSERT_TRUE(none.ok()) << none.status();
    EXPECT_FALSE(none->has_value()) << "resized with no node joined";
    train(*trainer, k, elastic);
  }

  // A worker joins: the job grows onto it at the next step.
  absl::StatusOr<int> added = local_->add_worker("CPU=2");
  ASSERT_TRUE(added.ok()) << added.status();
  const uint32_t joined = local_->worker_node(*added);
  std::optional<ResizeReport> grown = resize_before(scaler, 3);
  ASSERT_TRUE(grown.has_value()) << "the job did not grow onto node " << joined;
  EXPECT_EQ(grown->from_dp, 2);
  EXPECT_EQ(grown->to_dp, 3);
  EXPECT_EQ(grown->cause, absl::StrCat("node ", joined, " joined"));
  EXPECT_EQ(grown->split.micro_batch, 4);
  EXPECT_TRUE(absl::StrContains(grown->summary(), "step 3: dp 2 -> 3 (node ")) << grown->summary();
  std::vector<std::optional<uint32_t>> at = rank_nodes(*trainer);
  ASSERT_EQ(at.size(), 3u);
  EXPECT_EQ(at[2], std::optional<uint32_t>(joined))
      << "the new rank is not on the node that joined";
  for (int k = 3; k <= 4; ++k)
    train(*trainer, k, elastic);

  // Rank 1's node is drained: the job leaves it at the next step, and
  // `troupe drain` then finds it empty.
  ASSERT_TRUE(at[1].has_value());
  const uint32_t drained = *at[1];
  ASSERT_TRUE(driver_->drain_node(drained, true, "maintenance").ok());
  std::optional<ResizeReport> shrunk = resize_before(scaler, 5);
  ASSERT_TRUE(shrunk.has_value()) << "the job did not leave drained node " << drained;
  EXPECT_EQ(shrunk->to_dp, 2);
  EXPECT_EQ(shrunk->cause, absl::StrCat("node ", drained, " drained"));
  auto [code, output] = local_->run_cli({"drain", absl::StrCat(drained), "--timeout", "30"});
  EXPECT_EQ(code, 0) << output;
  EXPECT_TRUE(absl::StrContains(output, "is drained")) << output;
  absl::StatusOr<cluster::ClusterStatus> status = driver_->status();
  ASSERT_TRUE(status.ok()) << status.status();
  for (const cluster::NodeStatus& n : status->nodes) {
    if (n.info.index == drained) {
      EXPECT_TRUE(n.draining);
    }
  }
  // The rank that left gave its bundle back: nothing is reserved there.
  for (const cluster::PlacementGroupStatus& g : status->placement_groups) {
    for (uint32_t node : g.bundle_nodes)
      EXPECT_NE(node, drained) << "placement group " << g.name << " keeps a bundle there";
  }
  for (int k = 5; k <= 6; ++k)
    train(*trainer, k, elastic);

  // A worker with a rank is SIGKILLed: step 7 fails, the job goes on
  // without it, and step 7 runs again.
  at = rank_nodes(*trainer);
  ASSERT_EQ(at.size(), 2u);
  ASSERT_TRUE(at[1].has_value());
  const int victim = worker_of(*at[1]);
  ASSERT_GE(victim, 0);
  local_->kill_worker(victim);
  absl::StatusOr<StepOutcome> failed = trainer->step(7);
  ASSERT_FALSE(failed.ok()) << "step 7 did not notice the lost rank";
  absl::StatusOr<ResizeReport> lost =
      scaler.shrink_after_loss(7, failed.status(), trainer->controller());
  ASSERT_TRUE(lost.ok()) << lost.status();
  EXPECT_EQ(lost->to_dp, 1);
  EXPECT_TRUE(absl::StartsWith(lost->cause, "lost d1.p0.t0")) << lost->cause;
  EXPECT_EQ(trainer->controller().next_step(), 7);
  for (int k = 7; k <= kSteps; ++k)
    train(*trainer, k, elastic);
  finish(*trainer, elastic);
  EXPECT_EQ(scaler.history().size(), 3u);

  expect_same_steps(elastic, single, {2, 2, 3, 3, 2, 2, 1, 1}, "sgd, dp 2 -> 3 -> 2 -> 1",
                    "elastic scaler");
}

// ZeRO-3: the partitions move at each change, a lost rank's from the
// replica the next rank keeps of it (an elastic ZeRO job keeps one).
TEST_F(ElasticScalerTest, AZero3JobGrowsShrinksOnALossAndOnADrain) {
  constexpr int kSteps = 10;
  const RunResult single = single_run(kSteps, "zero-single");
  ASSERT_EQ(single.outcomes.size(), static_cast<size_t>(kSteps));
  TrainConfig config = config_for(2);
  config.zero.stage = 3;
  auto trainer = start(config, "zero-elastic");
  ASSERT_NE(trainer, nullptr);
  ASSERT_NE(trainer->elastic(), nullptr);
  ElasticScaler scaler(*driver_, *trainer, config);
  RunResult elastic;
  auto grow = [&](int64_t step) {
    absl::StatusOr<int> added = local_->add_worker("CPU=2");
    ASSERT_TRUE(added.ok()) << added.status();
    std::optional<ResizeReport> grown = resize_before(scaler, step);
    ASSERT_TRUE(grown.has_value()) << "the job did not grow before step " << step;
    EXPECT_EQ(grown->to_dp, 3);
  };
  for (int k = 1; k <= 2; ++k)
    train(*trainer, k, elastic);
  grow(3);
  for (int k = 3; k <= 4; ++k)
    train(*trainer, k, elastic);

  // Rank 1's worker is SIGKILLed: its partition comes from rank 2's replica.
  std::vector<std::optional<uint32_t>> at = rank_nodes(*trainer);
  ASSERT_EQ(at.size(), 3u);
  ASSERT_TRUE(at[1].has_value());
  local_->kill_worker(worker_of(*at[1]));
  absl::StatusOr<StepOutcome> failed = trainer->step(5);
  ASSERT_FALSE(failed.ok()) << "step 5 did not notice the lost rank";
  absl::StatusOr<ResizeReport> lost =
      scaler.shrink_after_loss(5, failed.status(), trainer->controller());
  ASSERT_TRUE(lost.ok()) << lost.status();
  EXPECT_EQ(lost->to_dp, 2);
  EXPECT_TRUE(absl::StartsWith(lost->cause, "lost d1.p0.t0")) << lost->cause;
  for (int k = 5; k <= 6; ++k)
    train(*trainer, k, elastic);

  grow(7);
  for (int k = 7; k <= 8; ++k)
    train(*trainer, k, elastic);
  // Rank 1's node is drained: its partition moves off it.
  at = rank_nodes(*trainer);
  ASSERT_EQ(at.size(), 3u);
  ASSERT_TRUE(at[1].has_value());
  ASSERT_TRUE(driver_->drain_node(*at[1], true, "maintenance").ok());
  std::optional<ResizeReport> drained = resize_before(scaler, 9);
  ASSERT_TRUE(drained.has_value()) << "the job did not leave drained node " << *at[1];
  EXPECT_EQ(drained->to_dp, 2);
  for (int k = 9; k <= kSteps; ++k)
    train(*trainer, k, elastic);
  finish(*trainer, elastic);

  expect_same_steps(elastic, single, {2, 2, 3, 3, 2, 2, 3, 3, 2, 2},
                    "sgd, ZeRO-3, dp 2 -> 3 -> 2 -> 3 -> 2", "elastic scaler");
}

// With fault tolerance, a lost rank of a resized job is replaced at the
// shape its coordinate has now; under ZeRO its shard restores the partition
// the rank has now from the replica its buddy keeps.
void ElasticScalerTest::replaces_a_lost_rank_at_its_shape_now(int zero_stage) {
  const std::string name = absl::StrCat("ft-zero", zero_stage);
  constexpr int kSteps = 6;
  const RunResult single = single_run(kSteps, name + "-single");
  ASSERT_EQ(single.outcomes.size(), static_cast<size_t>(kSteps));
  TrainConfig config = config_for(2);
  config.zero.stage = zero_stage;
  config.fault_tolerance = {.enabled = true,
                            .spare_nodes = 0,
                            .max_failures = 2,
                            .wait_for_node_s = 60,
                            .step_timeout_s = 120};
  auto trainer = start(config, name + "-elastic");
  ASSERT_NE(trainer, nullptr);
  ASSERT_NE(trainer->elastic(), nullptr);
  ElasticScaler scaler(*driver_, *trainer, config);
  RecoveringStepper stepper(*trainer, nullptr, config.fault_tolerance);
  RunResult elastic;
  train(*trainer, 1, elastic);
  absl::StatusOr<int> added = local_->add_worker("CPU=2");
  ASSERT_TRUE(added.ok()) << added.status();
  ASSERT_TRUE(resize_before(scaler, 2).has_value()) << "the job did not grow";
  train(*trainer, 2, elastic);
  // Rank 1's worker dies: the head restarts its actors on a node with room,
  // with the options they were spawned with (dp 2, micro-batch 6); they
  // join at rank 1 of dp 3 with micro-batch 4, and step 3 runs again.
  std::vector<std::optional<uint32_t>> at = rank_nodes(*trainer);
  ASSERT_EQ(at.size(), 3u);
  ASSERT_TRUE(at[1].has_value());
  local_->kill_worker(worker_of(*at[1]));
  std::vector<RecoveryReport> recoveries;
  for (int k = 3; k <= kSteps; ++k) {
    absl::StatusOr<StepOutcome> outcome =
        stepper.step(k, [&](const RecoveryReport& r) { recoveries.push_back(r); });
    ASSERT_TRUE(outcome.ok()) << "step " << k << ": " << outcome.status();
    elastic.losses.push_back(outcome->loss);
    elastic.norms.push_back(outcome->grad_norm);
    elastic.outcomes.push_back(*outcome);
  }
  EXPECT_EQ(recoveries.size(), 1u);
  finish(*trainer, elastic);
  expect_same_steps(
      elastic, single, {2, 3, 3, 3, 3, 3},
      absl::StrCat("sgd, ", zero_stage == 0 ? "DDP" : absl::StrCat("ZeRO-", zero_stage),
                   ", dp 2 -> 3, a rank replaced"),
      "elastic recovery");
}

TEST_F(ElasticScalerTest, AResizedJobReplacesALostRankAtItsShapeNow) {
  replaces_a_lost_rank_at_its_shape_now(0);
}

TEST_F(ElasticScalerTest, AResizedZero3JobReplacesALostRankWithItsPartitionNow) {
  replaces_a_lost_rank_at_its_shape_now(3);
}

TEST_F(ElasticScalerTest, AJoinThatCannotKeepTheGlobalBatchIsRefusedWithTheReason) {
  TrainConfig config = config_for(2);
  config.elasticity.micro_batch_sizes = {6};  // 12 = 2 x 6 only
  auto trainer = start(config, "scaler-refused");
  ASSERT_NE(trainer, nullptr);
  ElasticScaler scaler(*driver_, *trainer, config);
  RunResult run;
  train(*trainer, 1, run);
  absl::StatusOr<int> added = local_->add_worker("CPU=2");
  ASSERT_TRUE(added.ok()) << added.status();
  const uint32_t joined = local_->worker_node(*added);
  // The driver hears of the node (joined, then ready); each time the
  // scaler looks, it stays at dp 2 and says why once.
  std::vector<std::string> notes;
  const absl::Time until = absl::Now() + kNoticeWait;
  while (notes.empty() && absl::Now() < until) {
    absl::StatusOr<std::optional<ResizeReport>> r = scaler.before_step(2);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_FALSE(r->has_value()) << (*r)->summary();
    notes = scaler.take_notes();
    absl::SleepFor(absl::Milliseconds(50));
  }
  ASSERT_EQ(notes.size(), 1u) << absl::StrJoin(notes, "\n");
  EXPECT_EQ(notes[0], absl::StrCat("node ", joined,
                                   " joined, but the job stays at dp 2: the global batch 12 "
                                   "cannot be split over dp 3: it is not 3 x a micro-batch of "
                                   "one of [6] x a whole number of accumulation steps"));
  EXPECT_EQ(trainer->controller().mesh().dp, 2);
  for (int k = 2; k <= 3; ++k) {
    ASSERT_TRUE(scaler.before_step(k).ok());
    EXPECT_TRUE(scaler.take_notes().empty()) << "said twice";
    train(*trainer, k, run);
  }
  EXPECT_TRUE(trainer->stop().ok());
}

// The same through `troupe train` on a running cluster, as a user runs it:
// the progress lines announce each change, the metrics carry it, `troupe
// status` shows the job's dp history, and `troupe drain` returns once the
// job has left the node.
TEST_F(ElasticScalerTest, TroupeTrainGrowsOnAJoinAndLeavesADrainedNode) {
  char dir_template[] = "/tmp/troupe-elastic-train-XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template;
  const std::string config = dir + "/elastic.json";
  std::ofstream(config) << R"({
    "train_batch_size": 48, "train_micro_batch_size_per_gpu": 8,
    "optimizer": {"type": "AdamW", "params": {"lr": 3e-3}},
    "model": {"n_layer": 2, "n_head": 4, "n_embd": 64, "seq_len": 30, "vocab_size": 256},
    "data": {"synthetic": {"task": "addition", "digits": 2, "num_samples": 100000, "seed": 1}},
    "parallel": {"dp": 2},
    "elasticity": {"enabled": true, "min_dp": 1, "max_dp": 6, "micro_batch_sizes": [4, 6, 8]},
    "training": {"steps": 3000, "seed": 1234, "log_interval": 100, "eval_interval": 0}
  })";
  const std::string metrics = dir + "/metrics.jsonl";
  auto read = [](const std::string& path) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  };
  auto train = std::async(std::launch::async, [&] {
    return local_->run_cli({"train", "--config", config, "--output", dir + "/run", "--metrics",
                            metrics, "--threads", "1"});
  });
  // Waits until the metrics file contains `what` (bounded; not past the
  // end of the run).
  auto wait_metrics = [&](const std::string& what) {
    const absl::Time until = absl::Now() + absl::Seconds(120);
    while (absl::Now() < until) {
      if (absl::StrContains(read(metrics), what)) return true;
      if (train.wait_for(std::chrono::seconds(0)) == std::future_status::ready) return false;
      absl::SleepFor(absl::Milliseconds(50));
    }
    return false;
  };
  ASSERT_TRUE(wait_metrics("\"step\":20,")) << "training did not start: " << train.get().second;
  absl::StatusOr<int> added = local_->add_worker("CPU=2");
  ASSERT_TRUE(added.ok()) << added.status();
  const uint32_t joined = local_->worker_node(*added);
  ASSERT_TRUE(wait_metrics("\"to_dp\":3")) << "the job did not grow";
  // The first worker's node hosts a rank: drained, the job leaves it.
  const uint32_t drained = local_->worker_node(0);
  auto [drain_code, drain_out] =
      local_->run_cli({"drain", absl::StrCat(drained), "--timeout", "120"});
  EXPECT_EQ(drain_code, 0) << drain_out;
  EXPECT_TRUE(absl::StrContains(drain_out, "is drained")) << drain_out;
  auto [status_code, status_out] = local_->run_cli({"status"});
  EXPECT_EQ(status_code, 0) << status_out;
  EXPECT_TRUE(absl::StrContains(status_out, "dp history: 2 from step 1, 3 from step "))
      << status_out;
  auto [code, out] = train.get();
  ASSERT_EQ(code, 0) << out;
  EXPECT_TRUE(absl::StrContains(
      out, absl::StrCat(": dp 2 -> 3 (node ", joined, " joined); global batch 48 = 3 x 8 x 2")))
      << out;
  EXPECT_TRUE(absl::StrContains(
      out, absl::StrCat(": dp 3 -> 2 (node ", drained, " drained); global batch 48 = 2 x 8 x 3")))
      << out;
  EXPECT_TRUE(absl::StrContains(out, "resized 2 times")) << out;
  const std::string lines = read(metrics);
  EXPECT_TRUE(absl::StrContains(lines, "\"resize\":{\"cause\":\"node ")) << lines.substr(0, 400);
  EXPECT_TRUE(absl::StrContains(lines, "\"dp\":3")) << "no step at dp 3";
  EXPECT_TRUE(absl::StrContains(lines, "\"step\":3000,")) << "the run did not finish";
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace troupe::trainers
