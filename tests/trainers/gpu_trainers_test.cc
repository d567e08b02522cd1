// The trainers on a GPU (label gpu): a local cluster of two workers that both see this machine's
// first GPU, each offering it as GPU=1, so that two ranks share one device (their groups stage
// device buffers through host memory: docs/collectives.md). Checked against one rank on the same
// GPU and against the CPU: the same job's losses and gradient norms step by step and its weights
// at the end, within 1e-4 (cuBLAS picks its own kernels per shape, so the GPU's sums differ in
// the last bits between a batch of 8 and two of 4; 1e-5 for the CPU against the GPU at step 1,
// the figure for one stage on the same weights and batch). Without a GPU every test
// skips, saying why; TROUPE_REQUIRE_GPU=1 makes that a failure (scripts/gpu_check.sh).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>

#include "core/cluster/local_cluster.h"
#include "nn/device.h"
#include "tests/trainers/training_cluster.h"
#include "trainers/trainer.h"

namespace troupe::trainers {
namespace {

// `name` from the environment where set (a bundle run elsewhere), else the build's.
std::string build_path(const char* name, const char* built) {
  const char* env = std::getenv(name);
  return env != nullptr && *env != '\0' ? env : built;
}

class GpuTrainersTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (nn::cuda_device_count() == 0) return;
    auto local =
        cluster::LocalCluster::start({.workers = 2,
                                      .default_resources = "CPU=2,GPU=1",
                                      .worker_visible_devices = {"0", "0"},
                                      .troupe_binary = build_path("TROUPE_BINARY", TROUPE_BINARY),
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
    driver_ = nullptr;
    local_ = nullptr;
  }
  void SetUp() override {
    if (driver_ != nullptr) return;
    const std::string why = absl::StrCat("needs a CUDA device: ", nn::describe_devices());
    const char* require = std::getenv("TROUPE_REQUIRE_GPU");
    if (require != nullptr && std::string(require) == "1")
      FAIL() << "TROUPE_REQUIRE_GPU=1: " << why;
    GTEST_SKIP() << why;
  }

  // The addition job of the trainer tests on `dp` ranks, on `device`, 8 samples a step.
  static TrainConfig job(int dp, DeviceChoice device) {
    TrainConfig c = testing::elastic_sgd_config(dp, /*global_batch=*/8);
    c.elasticity.enabled = false;
    c.device = device;
    return c;
  }

  static void expect_close(const testing::RunResult& run, const testing::RunResult& base,
                           double tolerance, const std::string& what) {
    ASSERT_EQ(run.losses.size(), base.losses.size()) << what;
    for (size_t k = 0; k < base.losses.size(); ++k) {
      EXPECT_NEAR(run.losses[k], base.losses[k], tolerance * std::abs(base.losses[k]))
          << what << ", step " << k + 1;
      EXPECT_NEAR(run.norms[k], base.norms[k], tolerance * base.norms[k])
          << what << ", step " << k + 1;
    }
    ASSERT_EQ(run.params.size(), base.params.size()) << what;
    EXPECT_LT(testing::relative_difference(run.params, base.params), tolerance) << what;
  }

  inline static cluster::LocalCluster* local_ = nullptr;
  inline static Cluster* driver_ = nullptr;
};

constexpr int kSteps = 20;

TEST_F(GpuTrainersTest, OneGpuStageMatchesTheCpuStageAtStepOne) {
  testing::RunResult gpu = testing::run_steps(*driver_, job(1, DeviceChoice::kCuda), "gpu-1", 1, 8);
  testing::RunResult cpu = testing::run_steps(*driver_, job(1, DeviceChoice::kCpu), "cpu-1", 1, 8);
  expect_close(gpu, cpu, 1e-5, "one GPU stage against one CPU stage");
}

TEST_F(GpuTrainersTest, DdpOverTwoRanksSharingOneGpuMatchesOneRank) {
  testing::RunResult one =
      testing::run_steps(*driver_, job(1, DeviceChoice::kCuda), "ddp-1", kSteps, 8);
  testing::RunResult two =
      testing::run_steps(*driver_, job(2, DeviceChoice::kCuda), "ddp-2", kSteps, 8);
  expect_close(two, one, 1e-4, "DDP over 2 ranks on one GPU against 1");
}

TEST_F(GpuTrainersTest, Zero3OverTwoRanksSharingOneGpuMatchesOneRank) {
  TrainConfig one_rank = job(1, DeviceChoice::kCuda);
  TrainConfig zero3 = job(2, DeviceChoice::kCuda);
  zero3.zero.stage = 3;
  testing::RunResult one = testing::run_steps(*driver_, one_rank, "z3-1", kSteps, 8);
  testing::RunResult two = testing::run_steps(*driver_, zero3, "z3-2", kSteps, 8);
  expect_close(two, one, 1e-4, "ZeRO-3 over 2 ranks on one GPU against 1");
}

TEST_F(GpuTrainersTest, TwoPipelineStagesOnOneGpuMatchOneStage) {
  TrainConfig one_stage = job(1, DeviceChoice::kCuda);
  TrainConfig pipeline = job(1, DeviceChoice::kCuda);
  pipeline.parallel.pp = 2;
  pipeline.gradient_accumulation_steps = 2;  // two micro-batches in flight
  pipeline.micro_batch_size = 4;
  one_stage.gradient_accumulation_steps = 2;
  one_stage.micro_batch_size = 4;
  testing::RunResult one = testing::run_steps(*driver_, one_stage, "pp-1", kSteps, 8);
  testing::RunResult two = testing::run_steps(*driver_, pipeline, "pp-2", kSteps, 8);
  expect_close(two, one, 1e-4, "2 pipeline stages on one GPU against 1");
}

}  // namespace
}  // namespace troupe::trainers
