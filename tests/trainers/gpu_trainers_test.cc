// The trainers on a GPU (label gpu): a local cluster of workers that all see this machine's
// first GPU, each offering it as GPU=1, so that two ranks share one device (their groups stage
// device buffers through host memory: docs/collectives.md). Checked against one rank on the same
// GPU and against the CPU: the same job's losses and gradient norms step by step and its weights
// at the end, within 1e-4 (cuBLAS picks its own kernels per shape, so the GPU's sums differ in
// the last bits between a batch of 8 and two of 4; 1e-5 for the CPU against the GPU at step 1,
// the figure for one stage on the same weights and batch). Without a GPU every test
// skips, saying why; TROUPE_REQUIRE_GPU=1 makes that a failure (scripts/gpu_check.sh). Then a tp
// pair on two GPUs (where the machine has them), and a rank SIGKILLed mid-step on a GPU recovers
// bitwise.
#include <gtest/gtest.h>

#include <signal.h>

#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/cluster/local_cluster.h"
#include "nn/device.h"
#include "tests/trainers/training_cluster.h"
#include "trainers/recovery.h"
#include "trainers/trainer.h"

namespace troupe::trainers {
namespace {

// `name` from the environment where set (a bundle run elsewhere), else the build's.
std::string build_path(const char* name, const char* built) {
  const char* env = std::getenv(name);
  return env != nullptr && *env != '\0' ? env : built;
}

// The suite's cluster: three workers that all see this machine's first GPU, started only where
// there is one.
class GpuTrainersTest : public testing::TrainingClusterTest {
 protected:
  static void SetUpTestSuite() {
    if (nn::cuda_device_count() > 0) start_cluster("CPU=2,GPU=1", {"0", "0", "0"});
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

// Tensor parallelism on GPUs: a tp group's bundle holds a GPU per rank on one node, so it needs a
// machine with two; its group all-reduces device buffers through NCCL. Two ranks against one
// whole model on one GPU, 20 steps, within 1e-4 (the row-parallel sums run in another order).
TEST(GpuTensorParallelTest, ATpPairOnTwoGpusMatchesOneGpu) {
  const int gpus = nn::cuda_device_count();
  if (gpus < 2) {
    const char* require = std::getenv("TROUPE_REQUIRE_GPU");
    if (gpus == 0 && require != nullptr && std::string(require) == "1") {
      FAIL() << "TROUPE_REQUIRE_GPU=1";
    }
    GTEST_SKIP() << "needs two CUDA devices, this machine has " << gpus << ": "
                 << nn::describe_devices();
  }
  auto local =
      cluster::LocalCluster::start({.workers = 1,
                                    .default_resources = "CPU=2,GPU=2",
                                    .worker_visible_devices = {"0,1"},
                                    .troupe_binary = build_path("TROUPE_BINARY", TROUPE_BINARY),
                                    .echo_output = false});
  ASSERT_TRUE(local.ok()) << local.status();
  auto driver = Cluster::connect((*local)->client_options());
  ASSERT_TRUE(driver.ok()) << driver.status();
  TrainConfig whole = testing::elastic_sgd_config(1, /*global_batch=*/8);
  whole.elasticity.enabled = false;
  whole.device = DeviceChoice::kCuda;
  TrainConfig sliced = whole;
  sliced.parallel.tp = 2;
  testing::RunResult one = testing::run_steps(**driver, whole, "tp-1", kSteps, 8);
  testing::RunResult two = testing::run_steps(**driver, sliced, "tp-2", kSteps, 8);
  ASSERT_EQ(two.losses.size(), one.losses.size());
  ASSERT_EQ(two.norms.size(), one.norms.size());
  for (size_t k = 0; k < one.losses.size(); ++k) {
    EXPECT_NEAR(two.losses[k], one.losses[k], 1e-4 * std::abs(one.losses[k])) << "step " << k + 1;
    EXPECT_NEAR(two.norms[k], one.norms[k], 1e-4 * one.norms[k]) << "step " << k + 1;
  }
  ASSERT_EQ(two.params.size(), one.params.size());
  EXPECT_LT(testing::relative_difference(two.params, one.params), 1e-4);
}

// A rank SIGKILLed mid-step on a GPU: its group's members abort (NCCL between two GPUs, where
// the machine has them, else staging on the shared one), the rank's actors are restarted on the
// spare worker (on the same GPU as the lost one), restored from the survivor, and the step runs
// again; the weights end bitwise those of the same run without the loss (the GPU's kernels repeat
// their bits run after run).
TEST(GpuRecoveryTest, ARankKilledMidStepRecoversBitwise) {
  const int gpus = nn::cuda_device_count();
  if (gpus == 0) {
    const char* require = std::getenv("TROUPE_REQUIRE_GPU");
    if (require != nullptr && std::string(require) == "1") FAIL() << "TROUPE_REQUIRE_GPU=1";
    GTEST_SKIP() << "needs a CUDA device: " << nn::describe_devices();
  }
  // Workers 0 and 1 hold the ranks; worker 2 is the spare, on rank 1's GPU.
  const std::vector<std::string> visible =
      gpus >= 2 ? std::vector<std::string>{"0", "1", "1"} : std::vector<std::string>{"0", "0", "0"};
  auto local =
      cluster::LocalCluster::start({.workers = 3,
                                    .default_resources = "CPU=1,GPU=1",
                                    .worker_visible_devices = visible,
                                    .troupe_binary = build_path("TROUPE_BINARY", TROUPE_BINARY),
                                    .echo_output = false});
  ASSERT_TRUE(local.ok()) << local.status();
  auto driver = Cluster::connect((*local)->client_options());
  ASSERT_TRUE(driver.ok()) << driver.status();
  TrainConfig config = testing::elastic_sgd_config(2, /*global_batch=*/8);
  config.elasticity.enabled = false;
  config.device = DeviceChoice::kCuda;
  config.fault_tolerance = {.enabled = true,
                            .spare_nodes = 1,
                            .max_failures = 2,
                            .wait_for_node_s = 20,
                            .step_timeout_s = 60};
  constexpr int kRecoverySteps = 8;
  // kill_at 0: no loss.
  auto run = [&](int kill_at, const std::string& job, std::vector<RecoveryReport>* reports) {
    std::vector<float> params;
    auto trainer = start_trainer(**driver, config, job, 1);
    EXPECT_TRUE(trainer.ok()) << trainer.status();
    if (!trainer.ok()) return params;
    RecoveringStepper stepper(**trainer, nullptr, config.fault_tolerance);
    for (int64_t k = 1; k <= kRecoverySteps; ++k) {
      std::thread killer;
      if (k == kill_at) {
        // The worker hosting rank 1's stage, a little into the step.
        const uint64_t stage = (*trainer)->repair()->actors_at({.d = 1})[1].value;
        absl::StatusOr<cluster::ClusterStatus> status = (*driver)->status();
        EXPECT_TRUE(status.ok());
        int victim = -1;
        for (const cluster::ActorStatus& a : status->actors) {
          if (a.id != stage) continue;
          for (int i = 0; i < (*local)->num_workers(); ++i) {
            if ((*local)->worker_node(i) == a.node) victim = i;
          }
        }
        EXPECT_GE(victim, 0);
        killer = std::thread([&, victim] {
          absl::SleepFor(absl::Milliseconds(30));
          if (victim >= 0) (*local)->kill_worker(victim, SIGKILL);
        });
      }
      absl::StatusOr<StepOutcome> outcome =
          stepper.step(k, [&](const RecoveryReport& r) { reports->push_back(r); });
      if (killer.joinable()) killer.join();
      EXPECT_TRUE(outcome.ok()) << outcome.status();
      if (!outcome.ok()) return params;
    }
    absl::StatusOr<std::vector<float>> p = (*trainer)->master_params();
    EXPECT_TRUE(p.ok()) << p.status();
    if (p.ok()) params = *std::move(p);
    EXPECT_TRUE((*trainer)->stop().ok());
    return params;
  };
  std::vector<RecoveryReport> none, reports;
  const std::vector<float> whole = run(0, "gpu-whole", &none);
  const std::vector<float> recovered = run(4, "gpu-recovered", &reports);
  ASSERT_EQ(reports.size(), 1u);
  std::printf("[ recovery ] %s\n", reports[0].summary().c_str());
  // The survivors' groups failed within the failure detector's budget: the local cluster's 1 s
  // heartbeat timeout, and the abort's way to every member.
  EXPECT_LT(reports[0].detect_ms, 3000.0);
  ASSERT_EQ(recovered.size(), whole.size());
  EXPECT_EQ(recovered, whole);  // bitwise
}

}  // namespace
}  // namespace troupe::trainers
