// GPUs as cluster resources, on real head and worker processes: the workers
// read their GPUs through a stand-in NVML (fake_nvml.cc: two H100s and an
// A10), and each actor that asks for GPUs is given device indices of its
// own, which it reads with gpu_ids(). No GPU needed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "core/cluster/cluster.h"
#include "core/cluster/detail/http_status.h"
#include "core/cluster/gpus.h"
#include "core/cluster/local_cluster.h"
#include "tests/cluster/cluster_fixture.h"
#include "tests/cluster/probe_actors.h"

namespace troupe::cluster {
namespace {

using troupe::testing::GpuUser;
using Indices = std::vector<int>;

constexpr absl::Duration kCallTimeout = absl::Seconds(20);

// Worker 0 offers two of the three GPUs NVML shows; worker 1 declares four,
// one more than NVML shows (a stand-in).
LocalClusterOptions gpu_cluster() {
  ::setenv("TROUPE_NVML_LIBRARY", FAKE_NVML, 1);
  ::unsetenv("CUDA_VISIBLE_DEVICES");
  return testing::probe_cluster({"CPU=4,GPU=2", "CPU=1,GPU=4"});
}

class GpuClusterTest : public testing::LocalClusterTest {
 public:
  GpuClusterTest() : LocalClusterTest(gpu_cluster()) {}

  // A GpuUser on worker 0 asking for `resources`.
  absl::StatusOr<ActorRef<GpuUser>> spawn_on_worker0(const std::string& resources,
                                                     int max_restarts = 0) {
    return driver_->spawn<GpuUser>({.max_restarts = max_restarts,
                                    .resources = resources,
                                    .node = static_cast<int>(local_->worker_node(0))});
  }
  Indices gpus_of(const ActorRef<GpuUser>& actor) {
    absl::StatusOr<Indices> ids = actor.call(&GpuUser::gpu_ids).get(kCallTimeout);
    EXPECT_TRUE(ids.ok()) << ids.status();
    return ids.value_or(Indices{-1});
  }
  bool dead(ActorId id) {
    return wait_status([&](const ClusterStatus& s) {
      for (const ActorStatus& a : s.actors) {
        if (a.id == id.value) return a.state == ActorState::kDead;
      }
      return false;
    });
  }
};

TEST_F(GpuClusterTest, WholeGpuActorsGetDistinctDevices) {
  auto a = spawn_on_worker0("CPU=1,GPU=1", /*max_restarts=*/1);
  auto b = spawn_on_worker0("GPU=1");
  auto none = spawn_on_worker0("CPU=1");
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_TRUE(none.ok()) << none.status();
  std::set<Indices> got = {gpus_of(*a), gpus_of(*b)};
  EXPECT_EQ(got, (std::set<Indices>{{0}, {1}}));
  EXPECT_EQ(gpus_of(*none), Indices{});
  // Its devices are its own in its constructor already (a model is made on them there).
  for (const ActorRef<GpuUser>& actor : {*a, *b, *none}) {
    absl::StatusOr<Indices> at_start = actor.call(&GpuUser::constructed_with).get(kCallTimeout);
    ASSERT_TRUE(at_start.ok()) << at_start.status();
    EXPECT_EQ(*at_start, gpus_of(actor));
  }
  // The driver is no actor of a worker's: it holds none.
  EXPECT_EQ(gpu_ids(), Indices{});
  // Worker 0's two GPUs are taken.
  auto third = spawn_on_worker0("GPU=1");
  ASSERT_FALSE(third.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(third.status())) << third.status();
  // An in-place restart keeps the devices.
  const Indices before = gpus_of(*a);
  ASSERT_TRUE(driver_->kill(a->id(), /*no_restart=*/false).ok());
  EXPECT_EQ(gpus_of(*a), before);
}

TEST_F(GpuClusterTest, FractionsShareADevice) {
  auto a = spawn_on_worker0("GPU=0.5");
  auto b = spawn_on_worker0("GPU=0.5");
  auto c = spawn_on_worker0("GPU=1");
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(gpus_of(*a), Indices{0});
  EXPECT_EQ(gpus_of(*b), Indices{0});
  EXPECT_EQ(gpus_of(*c), Indices{1});
  auto odd = driver_->spawn<GpuUser>({.resources = "GPU=1.5"});
  ASSERT_FALSE(odd.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(odd.status())) << odd.status();
}

TEST_F(GpuClusterTest, AKilledActorsDeviceGoesToTheNext) {
  auto a = spawn_on_worker0("GPU=1");
  auto b = spawn_on_worker0("GPU=1");
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  const Indices freed = gpus_of(*a);
  ASSERT_TRUE(driver_->kill(a->id()).ok());
  ASSERT_TRUE(dead(a->id()));
  auto c = spawn_on_worker0("GPU=1");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(gpus_of(*c), freed);
}

TEST_F(GpuClusterTest, ARemovedGroupsActorIsWaitedForBeforeItsDeviceIsGiven) {
  // The head gives a removed group's share back at once; its actor, busy in
  // a call, leaves its node only once the call returns. A GPU asked for
  // meanwhile is given when it has.
  auto a = spawn_on_worker0("GPU=1");
  ASSERT_TRUE(a.ok()) << a.status();
  // Only worker 0 has the CPUs: the group takes its other GPU.
  auto pg = driver_->create_placement_group({"CPU=2,GPU=1"}, PlacementStrategy::kPack);
  ASSERT_TRUE(pg.ok()) << pg.status();
  ASSERT_TRUE(driver_->wait_placement_group(*pg, kCallTimeout).ok());
  auto in_group = driver_->spawn<GpuUser>(
      {.resources = "GPU=1", .placement_group = pg->value, .bundle_index = 0});
  ASSERT_TRUE(in_group.ok()) << in_group.status();
  const Indices held = gpus_of(*in_group);
  ASSERT_EQ(held.size(), 1u);
  Future<bool> busy = in_group->call(&GpuUser::hold, 400);
  absl::SleepFor(absl::Milliseconds(50));  // under way on its node
  ASSERT_TRUE(driver_->remove_placement_group(*pg).ok());
  auto next = spawn_on_worker0("GPU=1");
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(gpus_of(*next), held);
  static_cast<void>(busy.get(kCallTimeout));
}

TEST_F(GpuClusterTest, StatusListsEachWorkersGpus) {
  absl::StatusOr<ClusterStatus> s = driver_->status();
  ASSERT_TRUE(s.ok()) << s.status();
  std::vector<std::vector<std::string>> gpus(2);
  for (const NodeStatus& n : s->nodes) {
    for (int w = 0; w < 2; ++w) {
      if (n.info.index != local_->worker_node(w)) continue;
      for (const GpuDevice& g : n.info.gpus)
        gpus[static_cast<size_t>(w)].push_back(describe(g));
    }
  }
  const std::string h100 = "NVIDIA H100 80GB HBM3, 79.6 GiB";
  EXPECT_EQ(gpus[0], (std::vector<std::string>{"GPU 0: " + h100, "GPU 1: " + h100}));
  EXPECT_EQ(gpus[1], (std::vector<std::string>{"GPU 0: " + h100, "GPU 1: " + h100,
                                               "GPU 2: NVIDIA A10, 22.5 GiB",
                                               "GPU 3: GPU, memory unknown"}));
  // `troupe status` and the HTTP status: a line per worker with its GPUs.
  auto [code, out] = local_->run_cli({"status"});
  EXPECT_EQ(code, 0) << out;
  EXPECT_TRUE(absl::StrContains(out, "GPU 0: " + h100 + "; GPU 1: " + h100 + "\n")) << out;
  EXPECT_TRUE(absl::StrContains(out, "GPU 3: GPU, memory unknown")) << out;
  EXPECT_TRUE(absl::StrContains(render_status(*s), "GPU 2: NVIDIA A10, 22.5 GiB")) << out;
  EXPECT_TRUE(
      absl::StrContains(render_metrics(*s),
                        absl::StrCat("troupe_node_gpu_memory_bytes{node=\"", local_->worker_node(0),
                                     "\",gpu=\"1\",name=\"NVIDIA H100 80GB HBM3\"} ",
                                     int64_t{81559} * 1024 * 1024, "\n")));
  // Each worker said what it found as it started.
  const std::string found =
      "troupe worker: GPUs: 2 x NVIDIA H100 80GB HBM3 (79.6 GiB), 1 x NVIDIA A10 (22.5 GiB)";
  for (int w = 0; w < 2; ++w) {
    std::vector<std::string> lines = local_->worker_output(w);
    EXPECT_NE(std::find(lines.begin(), lines.end(), found), lines.end())
        << absl::StrJoin(lines, "\n");
  }
}

}  // namespace
}  // namespace troupe::cluster
