// The DDP trainer on a real local cluster (a head and three worker processes
// of the troupe executable): data parallelism must not change the math. DDP
// over 2 and 3 replicas gives the losses and weights of one replica on the
// same global batch (fp32, relative 1e-6), and two identical runs are bitwise
// identical.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "actors/data/token_dataset_writer.h"
#include "tests/trainers/training_cluster.h"
#include "trainers/config.h"
#include "trainers/data_parallel_trainer.h"

namespace troupe::trainers {
namespace {

constexpr int kSteps = 4;
constexpr int kGlobalBatch = 12;  // divisible by dp = 1, 2, 3

TrainConfig config_for(int dp, int accumulation = 1,
                       OptimizerType optimizer = OptimizerType::kAdamW) {
  TrainConfig c;
  c.parallel.dp = dp;
  c.gradient_accumulation_steps = accumulation;
  c.micro_batch_size = kGlobalBatch / dp / accumulation;
  c.train_batch_size = kGlobalBatch;
  c.model = testing::kTinyGpt;
  c.data.synthetic =
      SyntheticTaskConfig{.task = "addition", .digits = 2, .num_samples = 600, .seed = 7};
  c.optimizer.adamw = {
      .lr = 3e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
  c.optimizer.type = optimizer;
  c.optimizer.sgd = {.lr = 0.1f, .momentum = 0.9f, .weight_decay = 0.01f};
  c.lr_schedule = nn::LrSchedule::constant(optimizer == OptimizerType::kAdamW ? 3e-3f : 0.1f);
  c.gradient_clipping = 1.0;
  c.zero.reduce_bucket_size = 4096;  // several buckets, so that they overlap backward
  c.training.seed = 11;
  return c;
}

using testing::RunResult;

class DdpTest : public testing::TrainingClusterTest {
 protected:
  RunResult run(const TrainConfig& config) {
    RunResult result;
    auto trainer =
        DataParallelTrainer::start(*driver_, config, "ddp-test-" + std::to_string(++jobs_), 1);
    EXPECT_TRUE(trainer.ok()) << trainer.status();
    if (!trainer.ok()) return result;
    for (int k = 1; k <= kSteps; ++k) {
      auto outcome = (*trainer)->step(k);
      EXPECT_TRUE(outcome.ok()) << outcome.status();
      if (!outcome.ok()) return result;
      EXPECT_TRUE(outcome->applied);
      EXPECT_EQ(outcome->samples, kGlobalBatch);
      result.losses.push_back(outcome->loss);
      result.norms.push_back(outcome->grad_norm);
    }
    auto params = (*trainer)->master_params();
    EXPECT_TRUE(params.ok()) << params.status();
    if (params.ok()) result.params = *std::move(params);
    EXPECT_TRUE((*trainer)->stop().ok());
    return result;
  }

  // Trains kSteps and returns the losses and the validation over config.data.val_path.
  std::pair<RunResult, actors::ValidationResult> run_and_validate(const TrainConfig& config) {
    std::pair<RunResult, actors::ValidationResult> out;
    auto trainer =
        DataParallelTrainer::start(*driver_, config, "ddp-test-" + std::to_string(++jobs_), 1);
    EXPECT_TRUE(trainer.ok()) << trainer.status();
    if (!trainer.ok()) return out;
    for (int k = 1; k <= kSteps; ++k) {
      auto outcome = (*trainer)->step(k);
      EXPECT_TRUE(outcome.ok()) << outcome.status();
      if (!outcome.ok()) return out;
      out.first.losses.push_back(outcome->loss);
      out.first.norms.push_back(outcome->grad_norm);
    }
    auto params = (*trainer)->master_params();
    EXPECT_TRUE(params.ok()) << params.status();
    if (params.ok()) out.first.params = *std::move(params);
    auto validation = (*trainer)->validate();
    EXPECT_TRUE(validation.ok()) << validation.status();
    if (validation.ok()) out.second = *validation;
    EXPECT_TRUE((*trainer)->stop().ok());
    return out;
  }

  inline static int jobs_ = 0;
};

void expect_same_training(const RunResult& ddp, const RunResult& single, const char* what,
                          bool compare_weights) {
  testing::expect_same_training(ddp, single, what, compare_weights, "ddp");
}

// The gradients of dp replicas averaged by allreduce equal one replica's on
// the whole batch up to the order of the sums (fp32 rounding). SGD carries
// that difference into the weights linearly, so they must agree to 1e-6.
// Text from a dataset, validated on held-out text: DDP over 2 and ZeRO-3 over 2 train as one
// process does, and score every validation window once between them, to the same loss.
TEST_F(DdpTest, ValidationOnHeldOutTextIsOneProcesssOverTwoReplicasAndZero3) {
  const std::string dir = ::testing::TempDir() + "/ddp-validation";
  std::filesystem::create_directories(dir);
  auto text_tokens = [](const std::string& text, int repeat) {
    std::vector<int32_t> tokens;
    for (int r = 0; r < repeat; ++r) {
      for (char c : text)
        tokens.push_back(static_cast<unsigned char>(c));
    }
    return tokens;
  };
  ASSERT_TRUE(actors::write_token_dataset(
                  dir + "/train", text_tokens("To be, or not to be, that is the question:\n", 40),
                  256, "bytes", "")
                  .ok());
  std::vector<int32_t> val = text_tokens("Whether 'tis nobler in the mind to suffer\n", 30);
  ASSERT_TRUE(actors::write_token_dataset(dir + "/val", val, 256, "bytes", "").ok());
  auto with_text = [&](TrainConfig c) {
    c.data.synthetic.reset();
    c.data.path = dir + "/train";
    c.data.val_path = dir + "/val";
    return c;
  };
  auto [single, single_val] = run_and_validate(with_text(config_for(1)));
  const int64_t windows = (static_cast<int64_t>(val.size()) - 1) / testing::kTinyGpt.max_seq_len();
  EXPECT_EQ(single_val.windows, windows);
  EXPECT_EQ(single_val.tokens, windows * testing::kTinyGpt.max_seq_len());
  EXPECT_GT(single_val.loss(), 0);
  TrainConfig zero3 = with_text(config_for(2));
  zero3.zero.stage = 3;
  for (const auto& [config, what] :
       {std::pair{with_text(config_for(2)), "ddp, dp 2"}, std::pair{zero3, "zero-3, dp 2"}}) {
    auto [run, v] = run_and_validate(config);
    expect_same_training(run, single, what, false);
    EXPECT_EQ(v.windows, windows) << what;  // every window once
    EXPECT_NEAR(v.loss(), single_val.loss(), 1e-6 * single_val.loss()) << what;
  }
}

TEST_F(DdpTest, DataParallelMatchesOneReplicaOnTheSameGlobalBatchSgd) {
  RunResult single = run(config_for(1, 1, OptimizerType::kSgd));
  ASSERT_EQ(single.losses.size(), static_cast<size_t>(kSteps));
  EXPECT_LT(single.losses.back(), single.losses.front()) << "the model does not learn";
  expect_same_training(run(config_for(2, 1, OptimizerType::kSgd)), single, "sgd, dp 2", true);
  expect_same_training(run(config_for(3, 1, OptimizerType::kSgd)), single, "sgd, dp 3", true);
  expect_same_training(run(config_for(2, 2, OptimizerType::kSgd)), single,
                       "sgd, dp 2 x accumulation 2", true);
}

// AdamW divides each gradient by the root of its running square: a weight
// whose gradient is ~0 (a GELU unit that is off for every token) moves by
// lr * g / (|g| + eps), so rounding-level differences in g move it by a
// visible fraction of lr. The losses must still agree to 1e-6; the weights
// are reported, not compared.
TEST_F(DdpTest, DataParallelMatchesOneReplicaOnTheSameGlobalBatchAdamW) {
  RunResult single = run(config_for(1));
  ASSERT_EQ(single.losses.size(), static_cast<size_t>(kSteps));
  EXPECT_LT(single.losses.back(), single.losses.front()) << "the model does not learn";
  expect_same_training(run(config_for(2)), single, "adamw, dp 2", false);
  expect_same_training(run(config_for(3)), single, "adamw, dp 3", false);
}

TEST_F(DdpTest, IdenticalRunsAreBitwiseIdentical) {
  RunResult a = run(config_for(2));
  RunResult b = run(config_for(2));
  ASSERT_FALSE(a.params.empty());
  EXPECT_EQ(a.losses, b.losses);
  EXPECT_EQ(a.params, b.params);
}

TEST_F(DdpTest, NoOverlapGivesTheSameResult) {
  TrainConfig overlapped = config_for(2);
  TrainConfig serial = config_for(2);
  serial.zero.overlap_comm = false;
  RunResult a = run(overlapped);
  RunResult b = run(serial);
  EXPECT_EQ(a.params, b.params);
}

// fp16 with DeepSpeed's dynamic loss scaler, started at a scale so large
// that the scaled gradients overflow fp16: those steps are skipped (nothing
// applied, the scale backs off) until the scale fits, then training goes on.
TEST_F(DdpTest, Fp16OverflowSkipsStepsAndBacksOffTheLossScale) {
  TrainConfig c = config_for(2);
  c.fp16.enabled = true;
  c.fp16.dynamic.initial_scale_power = 24;
  c.fp16.dynamic.hysteresis = 1;
  auto trainer = DataParallelTrainer::start(*driver_, c, "ddp-test-fp16", 1);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  int skipped = 0, applied = 0;
  double scale = std::ldexp(1.0, 24);
  for (int k = 1; k <= 16; ++k) {
    auto outcome = (*trainer)->step(k);
    ASSERT_TRUE(outcome.ok()) << outcome.status();
    EXPECT_EQ(outcome->loss_scale, scale) << "step " << k;
    if (outcome->applied) {
      ++applied;
      EXPECT_TRUE(std::isfinite(outcome->grad_norm));
    } else {
      ++skipped;
      EXPECT_EQ(applied, 0) << "step " << k << " overflowed after the scale had come down";
      scale /= 2;  // backoff 0.5, hysteresis 1
    }
  }
  EXPECT_GE(skipped, 1);
  EXPECT_GE(applied, 1);
  EXPECT_EQ((*trainer)->controller().applied_steps(), applied);
  EXPECT_TRUE((*trainer)->stop().ok());
}

TEST_F(DdpTest, BadDatasetFailsTheStartNamingIt) {
  TrainConfig c = config_for(2);
  c.data.synthetic.reset();
  c.data.path = "/nonexistent/tokens";
  auto trainer = DataParallelTrainer::start(*driver_, c, "ddp-test-bad-data", 1);
  ASSERT_FALSE(trainer.ok());
  EXPECT_NE(std::string(trainer.status().message()).find("/nonexistent/tokens"), std::string::npos)
      << trainer.status();
}

}  // namespace
}  // namespace troupe::trainers
