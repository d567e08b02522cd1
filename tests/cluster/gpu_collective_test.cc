// Collective groups of actors on real GPUs (label gpu): a head and a worker
// of the troupe executable (LocalCluster), the worker offering the GPUs NVML
// shows, and DeviceReducer actors (device_reducer_actors.h) allreducing
// buffers in CUDA device memory through CollectiveGroup.
//
// Without the GPUs a test needs it skips, saying so (CI has none);
// TROUPE_REQUIRE_GPU=1 makes a skip of a one-GPU test a failure, as in the
// other GPU tests. Two actors with a GPU each go through NCCL; two sharing
// one GPU (GPU=0.5 each) are staged through host memory, since NCCL refuses
// two ranks on one device.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/cluster/cluster.h"
#include "core/cluster/collective_group.h"
#include "core/cluster/gpu_inventory.h"
#include "core/cluster/local_cluster.h"
#include "tests/cluster/cluster_fixture.h"
#include "tests/cluster/device_reducer_actors.h"

namespace troupe::cluster {
namespace {

using troupe::testing::DeviceReducer;

constexpr absl::Duration kCallTimeout = absl::Seconds(90);

// Why a test that needs `n` GPUs cannot run here; empty when it can.
std::string missing_gpus(int n) {
  const GpuInventory inventory = gpu_inventory();
  const int found = static_cast<int>(inventory.devices.size());
  if (found >= n) return "";
  std::string why = absl::StrCat("needs ", n, " GPU(s); NVML shows ", found);
  if (!inventory.note.empty()) absl::StrAppend(&why, " (", inventory.note, ")");
  const char* require = std::getenv("TROUPE_REQUIRE_GPU");
  if (n == 1 && require != nullptr && std::string(require) == "1") {
    ADD_FAILURE() << "TROUPE_REQUIRE_GPU=1 but this test " << why;
  }
  return why;
}

// `name` from the environment where set (scripts/gpu_check.sh runs this binary from a bundle on
// another machine), else what the build knew.
std::string build_path(const char* name, const char* built) {
  const char* env = std::getenv(name);
  return env != nullptr && *env != '\0' ? env : built;
}

LocalClusterOptions device_cluster() {
  LocalClusterOptions o;
  o.workers = 1;
  o.worker_resources = {absl::StrCat("CPU=4,GPU=", gpu_inventory().devices.size())};
  o.troupe_binary = build_path("TROUPE_BINARY", TROUPE_BINARY);
  o.worker_flags = {"--actor-lib-dir", build_path("TROUPE_DEVICE_LIB_DIR", DEVICE_LIB_DIR),
                    "--actor-lib", build_path("TROUPE_DEVICE_LIB", DEVICE_LIB)};
  return o;
}

// Starts the cluster only when the test has the GPUs it needs.
class GpuCollectiveTest : public testing::LocalClusterTest {
 public:
  GpuCollectiveTest() : LocalClusterTest(device_cluster()) {}
  void SetUp() override {}

  // Skips (returning false) unless `gpus` GPUs are here; starts the cluster.
  bool start(int gpus) {
    if (std::string why = missing_gpus(gpus); !why.empty()) {
      skipped_ = why;
      return false;
    }
    LocalClusterTest::SetUp();
    return !HasFatalFailure();
  }
  // Two reducers asking for `resources` each, declared as group `name` and
  // joined on their GPUs; returns them in rank order, or an empty list.
  std::vector<ActorRef<DeviceReducer>> pair(const std::string& name, const std::string& resources,
                                            const std::string& path) {
    std::vector<ActorRef<DeviceReducer>> reducers;
    for (int i = 0; i < 2; ++i) {
      auto r = driver_->spawn<DeviceReducer>(
          {.resources = resources, .node = static_cast<int>(local_->worker_node(0))});
      EXPECT_TRUE(r.ok()) << r.status();
      if (!r.ok()) return {};
      reducers.push_back(*r);
    }
    auto generation =
        declare_collective_group(*driver_, name, {reducers[0].id(), reducers[1].id()});
    EXPECT_TRUE(generation.ok()) << generation.status();
    std::vector<Future<std::string>> joins;
    for (auto& r : reducers)
      joins.push_back(r.call(&DeviceReducer::join, name, -2));
    for (auto& j : joins) {
      auto joined = j.get(kCallTimeout);
      EXPECT_TRUE(joined.ok()) << joined.status();
      if (!joined.ok()) return {};
      EXPECT_EQ(*joined, path);
    }
    return reducers;
  }

  std::string skipped_;
};

TEST_F(GpuCollectiveTest, TwoActorsWithAGpuEachAllreduceThroughNccl) {
  if (!start(2)) GTEST_SKIP() << skipped_;
  auto reducers = pair("nccl", "CPU=1,GPU=1", "device");
  ASSERT_EQ(reducers.size(), 2u);
  for (int64_t count : {int64_t{1}, int64_t{1000}, int64_t{1} << 22}) {
    std::vector<Future<std::vector<float>>> sums;
    for (auto& r : reducers)
      sums.push_back(r.call(&DeviceReducer::allreduce, count));
    for (auto& f : sums) {
      auto ends = f.get(kCallTimeout);
      ASSERT_TRUE(ends.ok()) << ends.status();
      EXPECT_EQ(*ends, (std::vector<float>{3.0f, 3.0f})) << count << " floats";
    }
  }
}

TEST_F(GpuCollectiveTest, TwoActorsSharingAGpuAreStagedAndMatch) {
  if (!start(1)) GTEST_SKIP() << skipped_;
  auto reducers = pair("shared", "CPU=1,GPU=0.5", "staged");
  ASSERT_EQ(reducers.size(), 2u);
  std::vector<Future<std::vector<float>>> sums;
  for (auto& r : reducers)
    sums.push_back(r.call(&DeviceReducer::allreduce, int64_t{1} << 20));
  for (auto& f : sums) {
    auto ends = f.get(kCallTimeout);
    ASSERT_TRUE(ends.ok()) << ends.status();
    EXPECT_EQ(*ends, (std::vector<float>{3.0f, 3.0f}));
  }
}

TEST_F(GpuCollectiveTest, AnAbortMidAllreduceFailsTheNcclWorkWithAborted) {
  if (!start(2)) GTEST_SKIP() << skipped_;
  auto reducers = pair("abort", "CPU=1,GPU=1", "device");
  ASSERT_EQ(reducers.size(), 2u);
  // Rank 0's allreduce waits on the device for rank 1, which never issues it.
  auto alone =
      reducers[0].call(&DeviceReducer::abort_alone, int64_t{1} << 20, 500).get(kCallTimeout);
  ASSERT_TRUE(alone.ok()) << alone.status();
  EXPECT_TRUE(absl::StartsWith(*alone, "pending after 500 ms|ABORTED")) << *alone;
  EXPECT_TRUE(absl::StrContains(*alone, "aborted by the test")) << *alone;
  EXPECT_TRUE(absl::StrContains(*alone, "|ABORTED")) << *alone;
  // Rank 1 hears of it through the host group.
  std::string failed;
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (absl::Now() < deadline) {
    auto f = reducers[1].call(&DeviceReducer::failed).get(kCallTimeout);
    ASSERT_TRUE(f.ok()) << f.status();
    failed = *f;
    if (failed != "OK") break;
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_TRUE(absl::StartsWith(failed, "ABORTED")) << failed;
}

}  // namespace
}  // namespace troupe::cluster
