// The layout rules both trainers share: group names, what each shard owns,
// and which shard keeps whose replica.
#include "trainers/mesh_layout.h"

#include <gtest/gtest.h>

namespace troupe::trainers {
namespace {

TEST(MeshLayoutTest, ADataParallelMeshHasOneGroupNamedAfterTheJob) {
  EXPECT_EQ(dp_group("run", {.dp = 4, .pp = 1, .tp = 1}, 0, 0), "run/dp");
  EXPECT_EQ(dp_group("run", {.dp = 1, .pp = 1, .tp = 1}, 0, 0), "run/dp");
}

TEST(MeshLayoutTest, AModelParallelMeshNamesEachGroupByItsCoordinates) {
  const actors::Mesh mesh{.dp = 2, .pp = 3, .tp = 2};
  EXPECT_EQ(dp_group("run", mesh, 2, 1), "run/dp/p2t1");
  EXPECT_EQ(dp_group("run", {.dp = 2, .pp = 1, .tp = 2}, 0, 1), "run/dp/p0t1");
  EXPECT_EQ(pipe_group("run", 1, 0), "run/pipe/d1t0");
  EXPECT_EQ(tp_group("run", 0, 2), "run/tp/d0p2");
}

TEST(MeshLayoutTest, DdpShardsOwnTheirStageAndZeroShardsTheirPartition) {
  const nn::ParamRange stage{100, 110};
  EXPECT_EQ(shard_range(stage, 0, 4, 3), stage);
  // ceil(10 / 4) = 3 a part: [100, 103) [103, 106) [106, 109) [109, 110).
  for (int zero = 1; zero <= 3; ++zero) {
    EXPECT_EQ(shard_range(stage, zero, 4, 1), (nn::ParamRange{103, 106}));
    EXPECT_EQ(shard_range(stage, zero, 4, 3), (nn::ParamRange{109, 110}));
  }
}

TEST(MeshLayoutTest, OnlyAZeroPartitionWithFaultToleranceOrElasticityHasABuddy) {
  TrainConfig c;
  const actors::Mesh mesh{.dp = 3, .pp = 1, .tp = 1};
  c.zero.stage = 1;
  EXPECT_FALSE(keeps_replicas(c, 3));  // neither fault tolerance nor elasticity
  EXPECT_EQ(buddy_of(c, mesh, {.d = 0, .p = 0, .t = 0}), -1);
  c.fault_tolerance.enabled = true;
  EXPECT_TRUE(keeps_replicas(c, 3));
  EXPECT_FALSE(keeps_replicas(c, 1));  // a rank alone has no other node to keep it
  c.fault_tolerance.enabled = false;
  c.elasticity.enabled = true;
  EXPECT_TRUE(keeps_replicas(c, 2));
  c.zero.stage = 0;  // DDP's replicas are each other's
  EXPECT_FALSE(keeps_replicas(c, 2));
}

TEST(MeshLayoutTest, TheNextDataParallelRankKeepsTheReplica) {
  TrainConfig c;
  c.zero.stage = 1;
  c.fault_tolerance.enabled = true;
  const actors::Mesh dp_only{.dp = 3, .pp = 1, .tp = 1};
  EXPECT_EQ(buddy_of(c, dp_only, {.d = 0, .p = 0, .t = 0}), 1);
  EXPECT_EQ(buddy_of(c, dp_only, {.d = 2, .p = 0, .t = 0}), 0);
  // In mesh order (t fastest, then p, then d): (d + 1 mod dp, p, t).
  const actors::Mesh mesh{.dp = 2, .pp = 2, .tp = 2};
  EXPECT_EQ(buddy_of(c, mesh, {.d = 0, .p = 1, .t = 1}),
            actors::index_of(mesh, {.d = 1, .p = 1, .t = 1}));
  EXPECT_EQ(buddy_of(c, mesh, {.d = 1, .p = 0, .t = 1}),
            actors::index_of(mesh, {.d = 0, .p = 0, .t = 1}));
}

}  // namespace
}  // namespace troupe::trainers
