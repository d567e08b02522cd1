// trainers/job_device.h: which device a job computes on, from its config and the cluster's
// workers, and what its stages ask the cluster for. The last tests start real clusters whose
// workers offer no GPU, or GPUs this machine does not have, and check the errors a user sees.
#include "trainers/job_device.h"

#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/cluster/local_cluster.h"
#include "nn/device.h"
#include "tests/trainers/training_cluster.h"
#include "trainers/trainer.h"

namespace troupe::trainers {
namespace {

cluster::NodeStatus worker(uint32_t index, const std::string& resources) {
  cluster::NodeStatus n;
  n.info.index = index;
  n.info.kind = cluster::NodeKind::kWorker;
  n.info.name = absl::StrCat("worker ", index);
  n.info.resources = resources;
  n.ready = true;
  return n;
}

TEST(JobDeviceTest, AutoIsCudaWhenEveryWorkerOffersAGpu) {
  std::vector<cluster::NodeStatus> nodes = {worker(1, "CPU=8,GPU=2"), worker(2, "CPU=8,GPU=1")};
  EXPECT_EQ(*resolve_device(DeviceChoice::kAuto, nodes), nn::DeviceKind::kCuda);
  EXPECT_EQ(*resolve_device(DeviceChoice::kCuda, nodes), nn::DeviceKind::kCuda);
  EXPECT_EQ(*resolve_device(DeviceChoice::kCpu, nodes), nn::DeviceKind::kCpu);

  // A driver, a dead worker and a draining one take no work: they do not count.
  cluster::NodeStatus driver = worker(3, "");
  driver.info.kind = cluster::NodeKind::kDriver;
  cluster::NodeStatus dead = worker(4, "CPU=8,GPU=0");
  dead.state = cluster::NodeState::kDead;
  cluster::NodeStatus draining = worker(5, "CPU=8");
  draining.draining = true;
  nodes.insert(nodes.end(), {driver, dead, draining});
  EXPECT_EQ(*resolve_device(DeviceChoice::kAuto, nodes), nn::DeviceKind::kCuda);
}

TEST(JobDeviceTest, AutoIsCpuWhenAWorkerHasNoGpuAndCudaNamesIt) {
  const std::vector<cluster::NodeStatus> nodes = {worker(1, "CPU=8,GPU=1"),
                                                  worker(2, "CPU=8,GPU=0,memory=8G")};
  EXPECT_EQ(*resolve_device(DeviceChoice::kAuto, nodes), nn::DeviceKind::kCpu);
  absl::StatusOr<nn::DeviceKind> cuda = resolve_device(DeviceChoice::kCuda, nodes);
  EXPECT_EQ(cuda.status().code(), absl::StatusCode::kFailedPrecondition);
  const std::string message(cuda.status().message());
  EXPECT_NE(message.find("worker node 2 (worker 2) offers no GPU"), std::string::npos) << message;
  EXPECT_NE(message.find("CPU=8,GPU=0,memory=8G"), std::string::npos) << message;
  EXPECT_NE(message.find("\"device\": \"cpu\""), std::string::npos) << message;

  EXPECT_EQ(*resolve_device(DeviceChoice::kAuto, {}), nn::DeviceKind::kCpu);
  EXPECT_EQ(resolve_device(DeviceChoice::kCuda, {}).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(JobDeviceTest, StagesAskForAGpuEachOnCuda) {
  TrainConfig config;
  config.device = DeviceChoice::kCpu;
  EXPECT_EQ(stage_resources(config), "CPU=1");
  EXPECT_EQ(stage_bundle(config, 4), "CPU=4");
  EXPECT_EQ(stage_needs(config, 1), "one CPU");
  config.device = DeviceChoice::kCuda;
  EXPECT_EQ(stage_resources(config), "CPU=1,GPU=1");
  EXPECT_EQ(stage_bundle(config, 4), "CPU=4,GPU=4");
  EXPECT_EQ(stage_needs(config, 2), "2 CPUs and 2 GPUs");
  EXPECT_EQ(job_device(config), nn::DeviceKind::kCuda);
}

std::vector<cluster::GpuDevice> h100s(int n) {
  std::vector<cluster::GpuDevice> out;
  for (int i = 0; i < n; ++i) {
    out.push_back({.index = i,
                   .name = "NVIDIA H100 80GB HBM3",
                   .memory_bytes = int64_t{80} << 30,
                   .uuid = absl::StrCat("GPU-", i)});
  }
  return out;
}

TEST(LocalGpuPlanTest, EachWorkerGetsItsOwnGpusWhereThereAreEnough) {
  LocalGpuPlan two = plan_local_gpus(h100s(2), 2, 8, DeviceChoice::kAuto);
  EXPECT_EQ(two.resources, (std::vector<std::string>{"CPU=8,GPU=1", "CPU=8,GPU=1"}));
  EXPECT_EQ(two.visible_devices, (std::vector<std::string>{"GPU-0", "GPU-1"}));
  EXPECT_NE(two.summary.find("each with its own GPU"), std::string::npos) << two.summary;

  LocalGpuPlan blocks = plan_local_gpus(h100s(8), 3, 4, DeviceChoice::kCuda);
  EXPECT_EQ(blocks.resources[2], "CPU=4,GPU=2");
  EXPECT_EQ(blocks.visible_devices,
            (std::vector<std::string>{"GPU-0,GPU-1", "GPU-2,GPU-3", "GPU-4,GPU-5"}));

  // Fewer GPUs than workers: they share, round-robin.
  LocalGpuPlan shared = plan_local_gpus(h100s(1), 2, 8, DeviceChoice::kAuto);
  EXPECT_EQ(shared.resources, (std::vector<std::string>{"CPU=8,GPU=1", "CPU=8,GPU=1"}));
  EXPECT_EQ(shared.visible_devices, (std::vector<std::string>{"GPU-0", "GPU-0"}));
  EXPECT_NE(shared.summary.find("sharing 1 GPU"), std::string::npos) << shared.summary;

  // A device without a UUID is named by its index.
  std::vector<cluster::GpuDevice> plain = h100s(1);
  plain[0].uuid.clear();
  EXPECT_EQ(plan_local_gpus(plain, 1, 2, DeviceChoice::kAuto).visible_devices[0], "0");
}

TEST(LocalGpuPlanTest, NoGpusOrCpuJobsOfferNone) {
  for (const LocalGpuPlan& plan : {plan_local_gpus({}, 2, 2, DeviceChoice::kAuto),
                                   plan_local_gpus(h100s(2), 2, 2, DeviceChoice::kCpu)}) {
    EXPECT_EQ(plan.resources, (std::vector<std::string>{"CPU=2", "CPU=2"}));
    EXPECT_EQ(plan.visible_devices, (std::vector<std::string>{"", ""}));
    EXPECT_EQ(plan.summary, "");
  }
}

// A local cluster's worker sees the devices it was given: its CUDA_VISIBLE_DEVICES reaches it.
TEST(LocalGpuPlanTest, AWorkerIsStartedWithItsVisibleDevices) {
  auto local = cluster::LocalCluster::start({.workers = 1,
                                             .default_resources = "CPU=1",
                                             .worker_visible_devices = {"GPU-7"},
                                             .troupe_binary = TROUPE_BINARY,
                                             .echo_output = false});
  ASSERT_TRUE(local.ok()) << local.status();
  const pid_t pid = (*local)->worker_pid(0);
  std::ifstream environ_file(absl::StrCat("/proc/", pid, "/environ"));
  std::string all((std::istreambuf_iterator<char>(environ_file)), std::istreambuf_iterator<char>());
  EXPECT_NE(all.find(std::string("CUDA_VISIBLE_DEVICES=GPU-7\0", 27)), std::string::npos);
}

// The DDP job of the trainer tests over `dp` ranks, asking for `device`.
TrainConfig ddp_job(DeviceChoice device, int dp = 2) {
  TrainConfig c = testing::elastic_sgd_config(dp, /*global_batch=*/8);
  c.elasticity.enabled = false;
  c.device = device;
  return c;
}

struct Started {
  std::unique_ptr<cluster::LocalCluster> local;
  std::unique_ptr<Cluster> driver;
};

Started start(const std::string& resources) {
  Started s;
  auto local = cluster::LocalCluster::start({.workers = 2,
                                             .default_resources = resources,
                                             .troupe_binary = TROUPE_BINARY,
                                             .echo_output = false});
  EXPECT_TRUE(local.ok()) << local.status();
  if (!local.ok()) return s;
  s.local = *std::move(local);
  auto driver = Cluster::connect(s.local->client_options());
  EXPECT_TRUE(driver.ok()) << driver.status();
  if (driver.ok()) s.driver = *std::move(driver);
  return s;
}

TEST(JobDeviceClusterTest, CudaOnWorkersWithoutGpusIsRefusedBeforeAnythingIsSpawned) {
  Started c = start("CPU=2");
  ASSERT_NE(c.driver, nullptr);
  absl::StatusOr<std::unique_ptr<Trainer>> trainer =
      start_trainer(*c.driver, ddp_job(DeviceChoice::kCuda), "cuda-job", 1);
  ASSERT_FALSE(trainer.ok());
  EXPECT_EQ(trainer.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(trainer.status().message().find("offers no GPU"), absl::string_view::npos)
      << trainer.status();
  absl::StatusOr<cluster::ClusterStatus> status = c.driver->status();
  ASSERT_TRUE(status.ok());
  EXPECT_TRUE(status->actors.empty());

  // "auto" on the same cluster trains on the CPU.
  absl::StatusOr<std::unique_ptr<Trainer>> cpu =
      start_trainer(*c.driver, ddp_job(DeviceChoice::kAuto), "auto-job", 1);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_TRUE((*cpu)->stop().ok());
}

// Workers that offer GPUs this machine does not have (stand-ins): "auto" resolves to cuda, the
// stage is spawned holding a GPU of its own - device 0 of its worker - and making its model
// there is what fails, as there is none.
TEST(JobDeviceClusterTest, AutoOnGpuWorkersGivesTheStageAGpu) {
  if (nn::cuda_device_count() > 0) GTEST_SKIP() << "this machine has a CUDA device";
  Started c = start("CPU=2,GPU=1");
  ASSERT_NE(c.driver, nullptr);
  absl::StatusOr<std::unique_ptr<Trainer>> trainer =
      start_trainer(*c.driver, ddp_job(DeviceChoice::kAuto, /*dp=*/1), "gpu-job", 1);
  ASSERT_FALSE(trainer.ok());
  EXPECT_EQ(trainer.status().code(), absl::StatusCode::kFailedPrecondition) << trainer.status();
  const std::string message(trainer.status().message());
  EXPECT_NE(message.find("cuda:0 asked for"), std::string::npos) << message;
  EXPECT_EQ(message.find("holds no GPU"), std::string::npos) << message;

  // Two ranks, each on device 0 of its worker: the same refusal from each.
  absl::StatusOr<std::unique_ptr<Trainer>> ddp =
      start_trainer(*c.driver, ddp_job(DeviceChoice::kCuda, /*dp=*/2), "gpu-ddp", 1);
  ASSERT_FALSE(ddp.ok());
  EXPECT_NE(ddp.status().message().find("cuda:0 asked for"), absl::string_view::npos)
      << ddp.status();
}

}  // namespace
}  // namespace troupe::trainers
