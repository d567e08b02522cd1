#include "core/cluster/detail/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <ostream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/cluster/detail/resources.h"

namespace troupe::cluster {

// Readable failures for EXPECT_EQ on Resources (found by argument-dependent lookup).
void PrintTo(const Resources& r, std::ostream* os) {
  *os << "{" << r.to_string() << "}";
}

namespace {

Resources R(std::string_view text) {
  absl::StatusOr<Resources> r = Resources::parse(text);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : Resources();
}

std::set<NodeIndex> distinct(const std::vector<NodeIndex>& nodes) {
  return std::set<NodeIndex>(nodes.begin(), nodes.end());
}

// ---------------------------------------------------------------- Resources

TEST(ResourcesTest, ParsesNamedAmounts) {
  Resources r = R("CPU=2, GPU=0.5 ,memory=8G,tpu_v4=1");
  EXPECT_EQ(r.get("CPU"), 2);
  EXPECT_EQ(r.get("GPU"), 0.5);
  EXPECT_EQ(r.get("memory"), 8.0 * 1024 * 1024 * 1024);
  EXPECT_EQ(r.get("tpu_v4"), 1);
  EXPECT_EQ(r.get("absent"), 0);
  EXPECT_EQ(r.amounts().size(), 4u);
  EXPECT_EQ(r.amounts().begin()->first, "CPU");  // sorted by name
}

TEST(ResourcesTest, EmptyTextIsEmptyResources) {
  EXPECT_TRUE(R("").empty());
  EXPECT_TRUE(R("  ").amounts().empty());
  EXPECT_TRUE(R("GPU=0").empty());  // zero everywhere
  EXPECT_EQ(R("GPU=0").amounts().size(), 1u);
  EXPECT_FALSE(R("GPU=0.25").empty());
}

TEST(ResourcesTest, MemorySuffixesArePowersOf1024) {
  EXPECT_EQ(R("memory=512").get("memory"), 512);
  EXPECT_EQ(R("memory=3K").get("memory"), 3 * 1024.0);
  EXPECT_EQ(R("memory=2M").get("memory"), 2 * 1048576.0);
  EXPECT_EQ(R("memory=8g").get("memory"), 8 * 1073741824.0);
  EXPECT_EQ(R("memory=1T").get("memory"), 1099511627776.0);
  EXPECT_EQ(R("memory=1.5K").get("memory"), 1536);
}

struct BadInput {
  std::string text;
  std::string mentions;  // the message names the bad item and why
};

TEST(ResourcesTest, RejectsBadInputNamingTheItem) {
  const std::vector<BadInput> cases = {
      {"CPU", "'CPU'"},                          // missing '='
      {"CPU=2,GPU", "'GPU'"},                    // missing '=' later on
      {"=2", "empty resource name"},             // empty name
      {"CPU=1,CPU=2", "given twice"},            // duplicate key
      {"CPU=-1", "negative"},                    // negative
      {"memory=8X", "unknown suffix 'X'"},       // unknown suffix
      {"memory=8GB", "unknown suffix 'GB'"},     // not a single letter
      {"CPU=2G", "only memory takes"},           // suffix on a count
      {"CPU=", "missing amount"},                // no amount
      {"CPU=two", "not a decimal"},              // not a number
      {"CPU=1e3", "only memory takes"},          // no exponents
      {"CPU=nan", "not a finite number"},        // nan
      {"CPU=1,", "''"},                          // trailing comma: empty item
      {"memory=0.1K", "whole number of bytes"},  // fraction of a byte
      {"my gpu=1", "blank"},                     // blank inside a name
  };
  for (const BadInput& c : cases) {
    absl::StatusOr<Resources> r = Resources::parse(c.text);
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_NE(r.status().message().find(c.mentions), absl::string_view::npos)
        << c.text << " -> " << r.status();
  }
}

TEST(ResourcesTest, ToStringIsSortedWithMemorySuffixes) {
  EXPECT_EQ(R("memory=8G,GPU=0,CPU=2").to_string(), "CPU=2,GPU=0,memory=8G");
  EXPECT_EQ(R("memory=1536").to_string(), "memory=1536");  // suffixes only where they divide
  EXPECT_EQ(R("memory=1000").to_string(), "memory=1000");
  EXPECT_EQ(R("memory=1024M").to_string(), "memory=1G");
  EXPECT_EQ(R("CPU=0.5").to_string(), "CPU=0.5");
  EXPECT_EQ(Resources().to_string(), "");
}

TEST(ResourcesTest, ToStringRoundTripsThroughParse) {
  Resources odd;
  odd.set("CPU", 0.1 + 0.2);  // 0.30000000000000004
  odd.set("GPU", 1.0 / 3);
  odd.set("memory", 123456789);
  odd.set("big", 1e20);
  odd.set("tiny", 1e-7);
  const std::vector<Resources> cases = {R(""), R("CPU=2,GPU=0,memory=8G"), R("memory=1.5T"),
                                        R("node:10.0.0.1=0.001"), odd};
  for (const Resources& r : cases) {
    absl::StatusOr<Resources> back = Resources::parse(r.to_string());
    ASSERT_TRUE(back.ok()) << r.to_string() << ": " << back.status();
    EXPECT_EQ(back->amounts(), r.amounts()) << r.to_string();  // exact, not within epsilon
  }
}

TEST(ResourcesTest, ContainsTreatsAbsentAsZeroWithTolerance) {
  Resources node = R("CPU=4,GPU=1");
  EXPECT_TRUE(node.contains(R("CPU=4")));
  EXPECT_TRUE(node.contains(R("CPU=1,GPU=1")));
  EXPECT_TRUE(node.contains(R("")));
  EXPECT_TRUE(node.contains(R("TPU=0")));
  EXPECT_FALSE(node.contains(R("CPU=4.5")));
  EXPECT_FALSE(node.contains(R("TPU=1")));
  Resources tenths;
  for (int i = 0; i < 10; ++i)
    tenths += R("CPU=0.1");  // 0.9999999999999999
  EXPECT_TRUE(tenths.contains(R("CPU=1")));
}

TEST(ResourcesTest, ArithmeticAndEquality) {
  Resources r = R("CPU=4,GPU=2");
  r -= R("CPU=1.5,GPU=2");
  EXPECT_EQ(r, R("CPU=2.5"));  // GPU=0 equals an absent GPU
  r += R("memory=1G");
  EXPECT_EQ(r, R("CPU=2.5,memory=1G"));
  EXPECT_NE(r, R("CPU=2.5"));
  Resources drift = R("CPU=0.1") + R("CPU=0.2") - R("CPU=0.3");
  EXPECT_EQ(drift.get("CPU"), 0.0);  // snapped to exactly zero
  EXPECT_TRUE(drift.empty());
  EXPECT_TRUE((R("CPU=1") - R("CPU=2")).any_negative());
}

TEST(PlacementStrategyTest, ParsesNamesInAnyCase) {
  for (PlacementStrategy s : {PlacementStrategy::kPack, PlacementStrategy::kSpread,
                              PlacementStrategy::kStrictPack, PlacementStrategy::kStrictSpread}) {
    absl::StatusOr<PlacementStrategy> back = parse_placement_strategy(to_string(s));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, s);
  }
  EXPECT_EQ(*parse_placement_strategy("strict_spread"), PlacementStrategy::kStrictSpread);
  EXPECT_EQ(*parse_placement_strategy("Pack"), PlacementStrategy::kPack);
  absl::StatusOr<PlacementStrategy> bad = parse_placement_strategy("STRICT");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("STRICT_SPREAD"), absl::string_view::npos);
}

// ----------------------------------------------------------- actor placement

class SchedulerTest : public ::testing::Test {
 protected:
  // Three worker nodes, as in the strategy tests: 1..3 with 4 CPUs each.
  void add_three_nodes(std::string_view each = "CPU=4") {
    for (NodeIndex n = 1; n <= 3; ++n)
      s_.add_node(n, R(each));
  }

  Placement place(std::string_view resources, std::optional<NodeIndex> node = std::nullopt,
                  const std::set<NodeIndex>& excluded = {}) {
    absl::StatusOr<Placement> p =
        s_.place_actor({.resources = R(resources), .node = node}, excluded);
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? *p : Placement{};
  }

  absl::StatusOr<Placement> place_in(PlacementGroupId group, int bundle, std::string_view resources,
                                     std::optional<NodeIndex> node = std::nullopt) {
    return s_.place_actor(
        {.resources = R(resources), .node = node, .group = group, .bundle_index = bundle});
  }

  PlacementGroupId create(std::vector<Resources> bundles, PlacementStrategy strategy,
                          std::string name = "") {
    absl::StatusOr<PlacementGroupId> id =
        s_.create_placement_group(std::move(bundles), strategy, std::move(name));
    EXPECT_TRUE(id.ok()) << id.status();
    return id.ok() ? *id : PlacementGroupId{};
  }

  Scheduler::GroupInfo info(PlacementGroupId id) {
    std::optional<Scheduler::GroupInfo> g = s_.group(id);
    EXPECT_TRUE(g.has_value()) << to_string(id);
    return g.value_or(Scheduler::GroupInfo{});
  }

  std::map<NodeIndex, Resources> all_available() const {
    std::map<NodeIndex, Resources> out;
    for (NodeIndex n : s_.nodes())
      out[n] = s_.available(n);
    return out;
  }

  Scheduler s_;
};

TEST_F(SchedulerTest, NodesAndTheirResources) {
  s_.add_node(2, R("CPU=8"));
  s_.add_node(0, R("CPU=2,memory=4G"));
  EXPECT_EQ(s_.nodes(), (std::vector<NodeIndex>{0, 2}));
  EXPECT_EQ(s_.total(0), R("CPU=2,memory=4G"));
  EXPECT_EQ(s_.available(2), R("CPU=8"));
  EXPECT_TRUE(s_.total(7).empty());
  EXPECT_TRUE(s_.remove_node(7).empty());
}

TEST_F(SchedulerTest, GpuActorLandsOnTheGpuNode) {
  add_three_nodes();
  s_.add_node(4, R("CPU=2,GPU=1"));
  Placement p = place("CPU=1,GPU=1");
  EXPECT_EQ(p.node, 4u);
  EXPECT_FALSE(p.group.has_value());
  EXPECT_EQ(s_.available(4), R("CPU=1,GPU=0"));
  EXPECT_EQ(s_.available(1), R("CPU=4"));
}

TEST_F(SchedulerTest, NothingFitsIsResourceExhaustedNamingTheRequest) {
  add_three_nodes();
  s_.add_node(4, R("CPU=2,GPU=1"));
  place("GPU=1");
  absl::StatusOr<Placement> p = s_.place_actor({.resources = R("CPU=1,GPU=1")});
  ASSERT_EQ(p.status().code(), absl::StatusCode::kResourceExhausted) << p.status();
  EXPECT_NE(p.status().message().find("{CPU=1,GPU=1}"), absl::string_view::npos) << p.status();
  EXPECT_NE(p.status().message().find("GPU=0"), absl::string_view::npos) << p.status();
  EXPECT_NE(p.status().message().find("CPU=4 (node 1)"), absl::string_view::npos) << p.status();
  EXPECT_NE(p.status().message().find("release actors"), absl::string_view::npos) << p.status();
  // Asking for more than any node has at all says so.
  p = s_.place_actor({.resources = R("CPU=16")});
  ASSERT_EQ(p.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(p.status().message().find("bigger node"), absl::string_view::npos) << p.status();
}

TEST_F(SchedulerTest, ReleaseReturnsResources) {
  s_.add_node(1, R("CPU=4,GPU=2,memory=16G"));
  Placement a = place("CPU=3,GPU=2,memory=10G");
  EXPECT_EQ(s_.available(1), R("CPU=1,memory=6G"));
  EXPECT_FALSE(s_.place_actor({.resources = R("CPU=2")}).ok());
  s_.release_actor(a, R("CPU=3,GPU=2,memory=10G"));
  EXPECT_EQ(s_.available(1), s_.total(1));
  place("CPU=2");
}

TEST_F(SchedulerTest, ReleaseNeverRaisesAboveTheTotal) {
  s_.add_node(1, R("CPU=4"));
  Placement a = place("CPU=1");
  s_.release_actor(a, R("CPU=1"));
  s_.release_actor(a, R("CPU=1"));  // a double release
  EXPECT_EQ(s_.available(1), R("CPU=4"));
}

TEST_F(SchedulerTest, SpreadsActorsAcrossEqualNodes) {
  add_three_nodes();
  std::vector<NodeIndex> where;
  for (int i = 0; i < 6; ++i)
    where.push_back(place("CPU=1").node);
  // Most CPU left after placement first, ties to the lowest index.
  EXPECT_EQ(where, (std::vector<NodeIndex>{1, 2, 3, 1, 2, 3}));
}

TEST_F(SchedulerTest, PrefersTheNodeWithTheMostCpuLeft) {
  s_.add_node(1, R("CPU=2"));
  s_.add_node(2, R("CPU=8"));
  s_.add_node(3, R("CPU=4"));
  EXPECT_EQ(place("CPU=1").node, 2u);
}

TEST_F(SchedulerTest, ZeroResourceActorFitsAnywhere) {
  s_.add_node(1, R("CPU=0"));
  EXPECT_EQ(place("").node, 1u);
  EXPECT_EQ(s_.available(1), R("CPU=0"));
}

TEST_F(SchedulerTest, PinnedNode) {
  add_three_nodes();
  EXPECT_EQ(place("CPU=1", NodeIndex{3}).node, 3u);
  EXPECT_EQ(place("CPU=3", NodeIndex{3}).node, 3u);
  absl::StatusOr<Placement> full = s_.place_actor({.resources = R("CPU=1"), .node = 3});
  EXPECT_EQ(full.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(full.status().message().find("pinned node 3"), absl::string_view::npos);
  EXPECT_EQ(s_.place_actor({.resources = R("CPU=1"), .node = 9}).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(s_.place_actor({.resources = R("CPU=1"), .node = 2}, {2}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(SchedulerTest, ExcludedNodesHostNothing) {
  s_.add_node(0, R("CPU=16"));  // the head, roomiest of all
  add_three_nodes();
  EXPECT_EQ(place("CPU=1").node, 0u);
  for (int i = 0; i < 12; ++i)
    EXPECT_NE(place("CPU=1", std::nullopt, {0}).node, 0u);
  absl::StatusOr<Placement> p = s_.place_actor({.resources = R("CPU=1")}, {0});
  EXPECT_EQ(p.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(p.status().message().find("1 excluded"), absl::string_view::npos) << p.status();
}

TEST_F(SchedulerTest, RejectsNegativeRequests) {
  add_three_nodes();
  Resources negative;
  negative.set("CPU", -1);
  EXPECT_EQ(s_.place_actor({.resources = negative}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s_.create_placement_group({negative}, PlacementStrategy::kPack).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(SchedulerTest, ReleaseAfterTheNodeRejoinedIsIgnored) {
  s_.add_node(1, R("CPU=4"));
  Placement old = place("CPU=2");
  s_.remove_node(1);
  s_.release_actor(old, R("CPU=2"));  // unknown node: no-op
  s_.add_node(1, R("CPU=4"));
  Placement fresh = place("CPU=3");
  s_.release_actor(old, R("CPU=2"));  // from the node's previous life
  EXPECT_EQ(s_.available(1), R("CPU=1"));
  s_.release_actor(fresh, R("CPU=3"));
  EXPECT_EQ(s_.available(1), R("CPU=4"));
}

TEST_F(SchedulerTest, AddingAKnownNodeUpdatesItsTotalKeepingWhatIsInUse) {
  s_.add_node(1, R("CPU=4"));
  Placement a = place("CPU=3");
  s_.add_node(1, R("CPU=8"));
  EXPECT_EQ(s_.available(1), R("CPU=5"));
  s_.release_actor(a, R("CPU=3"));
  EXPECT_EQ(s_.available(1), R("CPU=8"));
}

// ---------------------------------------------------------- placement groups

TEST_F(SchedulerTest, StrictSpreadPutsEachBundleOnItsOwnNode) {
  add_three_nodes();
  PlacementGroupId id =
      create({R("CPU=1"), R("CPU=1"), R("CPU=1")}, PlacementStrategy::kStrictSpread, "ranks");
  Scheduler::GroupInfo g = info(id);
  ASSERT_TRUE(g.placed);
  EXPECT_EQ(g.name, "ranks");
  EXPECT_EQ(g.strategy, PlacementStrategy::kStrictSpread);
  EXPECT_EQ(distinct(g.bundle_nodes), (std::set<NodeIndex>{1, 2, 3}));
  for (NodeIndex n = 1; n <= 3; ++n)
    EXPECT_EQ(s_.available(n), R("CPU=3"));
}

TEST_F(SchedulerTest, StrictSpreadWithMoreBundlesThanNodesWaitsForANode) {
  add_three_nodes();
  auto before = all_available();
  PlacementGroupId id =
      create(std::vector<Resources>(4, R("CPU=1")), PlacementStrategy::kStrictSpread);
  EXPECT_FALSE(info(id).placed);
  EXPECT_TRUE(info(id).bundle_nodes.empty());
  EXPECT_EQ(all_available(), before);  // pending reserves nothing
  EXPECT_TRUE(s_.retry_pending().empty());
  s_.add_node(4, R("CPU=4"));
  EXPECT_EQ(s_.retry_pending(), std::vector<PlacementGroupId>{id});
  Scheduler::GroupInfo g = info(id);
  ASSERT_TRUE(g.placed);
  EXPECT_EQ(distinct(g.bundle_nodes), (std::set<NodeIndex>{1, 2, 3, 4}));
  EXPECT_TRUE(s_.retry_pending().empty());  // nothing left pending
}

TEST_F(SchedulerTest, StrictSpreadMatchesScarceBundlesFirst) {
  // Greedy in bundle order would put the CPU bundle on node 1 (most CPU) and
  // leave the GPU bundle nowhere to go.
  s_.add_node(1, R("CPU=2,GPU=1"));
  s_.add_node(2, R("CPU=1"));
  PlacementGroupId id = create({R("CPU=1"), R("GPU=1")}, PlacementStrategy::kStrictSpread);
  Scheduler::GroupInfo g = info(id);
  ASSERT_TRUE(g.placed);
  EXPECT_EQ(g.bundle_nodes, (std::vector<NodeIndex>{2, 1}));
}

TEST_F(SchedulerTest, StrictPackNeedsOneNodeThatHoldsEverything) {
  add_three_nodes();
  PlacementGroupId fits = create({R("CPU=2"), R("CPU=2")}, PlacementStrategy::kStrictPack);
  Scheduler::GroupInfo g = info(fits);
  ASSERT_TRUE(g.placed);
  EXPECT_EQ(distinct(g.bundle_nodes).size(), 1u);
  EXPECT_TRUE(s_.available(g.bundle_nodes[0]).empty());

  auto before = all_available();
  PlacementGroupId big = create({R("CPU=3"), R("CPU=3")}, PlacementStrategy::kStrictPack);
  EXPECT_FALSE(info(big).placed);  // 6 CPUs free in all, but on no single node
  EXPECT_EQ(all_available(), before);
  s_.add_node(4, R("CPU=8"));
  EXPECT_EQ(s_.retry_pending(), std::vector<PlacementGroupId>{big});
  EXPECT_EQ(info(big).bundle_nodes, (std::vector<NodeIndex>{4, 4}));
  EXPECT_EQ(s_.available(4), R("CPU=2"));
}

TEST_F(SchedulerTest, StrictPackPicksTheTightestNode) {
  s_.add_node(1, R("CPU=8"));
  s_.add_node(2, R("CPU=4"));
  s_.add_node(3, R("CPU=2"));
  PlacementGroupId id = create({R("CPU=1"), R("CPU=2")}, PlacementStrategy::kStrictPack);
  EXPECT_EQ(info(id).bundle_nodes, (std::vector<NodeIndex>{2, 2}));
}

TEST_F(SchedulerTest, PackUsesOneNodeWhenItFits) {
  add_three_nodes();
  PlacementGroupId id = create({R("CPU=1"), R("CPU=2"), R("CPU=1")}, PlacementStrategy::kPack);
  Scheduler::GroupInfo g = info(id);
  ASSERT_TRUE(g.placed);
  EXPECT_EQ(distinct(g.bundle_nodes).size(), 1u);
}

TEST_F(SchedulerTest, PackSpillsOntoFewNodesWhenOneIsNotEnough) {
  add_three_nodes();
  PlacementGroupId id = create(std::vector<Resources>(4, R("CPU=2")), PlacementStrategy::kPack);
  Scheduler::GroupInfo g = info(id);
  ASSERT_TRUE(g.placed);
  EXPECT_EQ(distinct(g.bundle_nodes).size(), 2u);  // 8 CPUs: two full nodes, not three
  int empty_nodes = 0;
  for (NodeIndex n = 1; n <= 3; ++n)
    empty_nodes += s_.available(n).empty() ? 1 : 0;
  EXPECT_EQ(empty_nodes, 2);
}

TEST_F(SchedulerTest, SpreadUsesDistinctNodesWhenPossible) {
  add_three_nodes();
  PlacementGroupId id = create(std::vector<Resources>(3, R("CPU=1")), PlacementStrategy::kSpread);
  EXPECT_EQ(distinct(info(id).bundle_nodes), (std::set<NodeIndex>{1, 2, 3}));
}

TEST_F(SchedulerTest, SpreadSucceedsWithFewerNodesThanBundles) {
  add_three_nodes();
  PlacementGroupId id = create(std::vector<Resources>(5, R("CPU=1")), PlacementStrategy::kSpread);
  Scheduler::GroupInfo g = info(id);
  ASSERT_TRUE(g.placed);
  EXPECT_EQ(distinct(g.bundle_nodes), (std::set<NodeIndex>{1, 2, 3}));
  for (NodeIndex n = 1; n <= 3; ++n) {
    EXPECT_LE(std::count(g.bundle_nodes.begin(), g.bundle_nodes.end(), n), 2);
  }
}

TEST_F(SchedulerTest, SpreadShareANodeWhenOnlyOneHasRoom) {
  s_.add_node(1, R("CPU=4"));
  s_.add_node(2, R("CPU=1"));
  PlacementGroupId id = create({R("CPU=2"), R("CPU=2")}, PlacementStrategy::kSpread);
  EXPECT_EQ(info(id).bundle_nodes, (std::vector<NodeIndex>{1, 1}));
}

// Topology from the node inventory: a group spread over nodes talks across
// them, so nodes with RDMA NICs (their "RDMA" resource: active ports) come
// first, the most ports first, before the roomiest; a group that fits one
// node, and a single actor, are placed as before.
TEST_F(SchedulerTest, GroupsSpreadOverNodesWithRdmaFirst) {
  s_.add_node(1, R("CPU=8"));
  s_.add_node(2, R("CPU=4,RDMA=1"));
  s_.add_node(3, R("CPU=4,RDMA=2"));
  for (PlacementStrategy strategy :
       {PlacementStrategy::kSpread, PlacementStrategy::kStrictSpread}) {
    PlacementGroupId two = create(std::vector<Resources>(2, R("CPU=1")), strategy);
    EXPECT_EQ(distinct(info(two).bundle_nodes), (std::set<NodeIndex>{2, 3})) << to_string(strategy);
    PlacementGroupId one_more = create({R("CPU=1")}, strategy);
    EXPECT_EQ(info(one_more).bundle_nodes, (std::vector<NodeIndex>{3})) << to_string(strategy);
    ASSERT_TRUE(s_.remove_placement_group(one_more).ok());
    ASSERT_TRUE(s_.remove_placement_group(two).ok());
  }
  // More bundles than RDMA nodes: the others go where there is room.
  PlacementGroupId three =
      create(std::vector<Resources>(3, R("CPU=1")), PlacementStrategy::kSpread);
  EXPECT_EQ(distinct(info(three).bundle_nodes), (std::set<NodeIndex>{1, 2, 3}));
  ASSERT_TRUE(s_.remove_placement_group(three).ok());
  // PACK over two nodes: the one the group already uses, then RDMA.
  PlacementGroupId packed = create({R("CPU=5"), R("CPU=4")}, PlacementStrategy::kPack);
  EXPECT_EQ(info(packed).bundle_nodes, (std::vector<NodeIndex>{1, 3}));
  ASSERT_TRUE(s_.remove_placement_group(packed).ok());
  // One node holds it all: the best fit, RDMA or not.
  PlacementGroupId one = create({R("CPU=3"), R("CPU=3")}, PlacementStrategy::kPack);
  EXPECT_EQ(info(one).bundle_nodes, (std::vector<NodeIndex>{1, 1}));
  ASSERT_TRUE(s_.remove_placement_group(one).ok());
  EXPECT_EQ(place("CPU=1").node, 1u);  // an actor alone: the most CPU left
}

TEST_F(SchedulerTest, AGroupThatDoesNotFitReservesNothing) {
  add_three_nodes();
  place("CPU=3", NodeIndex{2});  // free: 4, 1, 4
  auto before = all_available();
  // In each, the first bundles would fit somewhere; the whole group does not.
  const std::vector<std::vector<Resources>> cases = {
      {R("CPU=2"), R("CPU=2"), R("CPU=5")},  // the last fits no node
      {R("CPU=3"), R("CPU=3"), R("CPU=3")},  // 9 CPUs free, but not in the right places
  };
  for (const std::vector<Resources>& bundles : cases) {
    for (PlacementStrategy strategy :
         {PlacementStrategy::kPack, PlacementStrategy::kSpread, PlacementStrategy::kStrictPack,
          PlacementStrategy::kStrictSpread}) {
      PlacementGroupId id = create(bundles, strategy);
      EXPECT_FALSE(info(id).placed) << to_string(strategy);
      EXPECT_EQ(all_available(), before) << to_string(strategy);
    }
  }
  EXPECT_EQ(s_.groups().size(), 8u);
  EXPECT_TRUE(s_.retry_pending().empty());
  EXPECT_EQ(all_available(), before);
}

TEST_F(SchedulerTest, RetryPendingPlacesInCreationOrder) {
  s_.add_node(1, R("CPU=4"));
  PlacementGroupId holder = create({R("CPU=4")}, PlacementStrategy::kPack);
  PlacementGroupId first = create({R("CPU=3")}, PlacementStrategy::kPack);
  PlacementGroupId second = create({R("CPU=3")}, PlacementStrategy::kPack);
  PlacementGroupId small = create({R("CPU=1")}, PlacementStrategy::kPack);
  EXPECT_FALSE(info(first).placed);
  ASSERT_TRUE(s_.remove_placement_group(holder).ok());
  EXPECT_EQ(s_.retry_pending(), (std::vector<PlacementGroupId>{first, small}));
  EXPECT_FALSE(info(second).placed);
}

TEST_F(SchedulerTest, RejectsStructurallyInvalidGroups) {
  add_three_nodes();
  EXPECT_EQ(s_.create_placement_group({}, PlacementStrategy::kPack).status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<PlacementGroupId> empty_bundle =
      s_.create_placement_group({R("CPU=1"), R("GPU=0")}, PlacementStrategy::kPack);
  EXPECT_EQ(empty_bundle.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(empty_bundle.status().message().find("bundle 1"), absl::string_view::npos);
  EXPECT_TRUE(s_.groups().empty());
  // Bigger than the cluster is not invalid: it waits.
  EXPECT_TRUE(s_.create_placement_group({R("CPU=64")}, PlacementStrategy::kStrictPack).ok());
}

TEST_F(SchedulerTest, GroupNamesAreUnique) {
  add_three_nodes();
  PlacementGroupId a = create({R("CPU=1")}, PlacementStrategy::kPack, "trainer");
  absl::StatusOr<PlacementGroupId> dup =
      s_.create_placement_group({R("CPU=1")}, PlacementStrategy::kPack, "trainer");
  EXPECT_EQ(dup.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(s_.group_by_name("trainer"), a);
  EXPECT_EQ(s_.group_by_name("nope"), std::nullopt);
  create({R("CPU=1")}, PlacementStrategy::kPack);  // unnamed groups never clash
  create({R("CPU=1")}, PlacementStrategy::kPack);
  ASSERT_TRUE(s_.remove_placement_group(a).ok());
  EXPECT_EQ(s_.group_by_name("trainer"), std::nullopt);
  PlacementGroupId b = create({R("CPU=1")}, PlacementStrategy::kPack, "trainer");
  EXPECT_NE(a, b);
  EXPECT_EQ(s_.group_by_name("trainer"), b);
}

TEST_F(SchedulerTest, RemovingAGroupReturnsItsReservations) {
  add_three_nodes();
  auto before = all_available();
  PlacementGroupId id = create(std::vector<Resources>(3, R("CPU=2")), PlacementStrategy::kSpread);
  ASSERT_TRUE(info(id).placed);
  ASSERT_TRUE(place_in(id, 0, "CPU=1").ok());
  EXPECT_NE(all_available(), before);
  ASSERT_TRUE(s_.remove_placement_group(id).ok());
  EXPECT_EQ(all_available(), before);  // what its actor held came back too
  EXPECT_EQ(s_.group(id), std::nullopt);
  EXPECT_EQ(s_.remove_placement_group(id).code(), absl::StatusCode::kNotFound);
}

TEST_F(SchedulerTest, RemovingAPendingGroup) {
  add_three_nodes();
  auto before = all_available();
  PlacementGroupId id = create({R("CPU=9")}, PlacementStrategy::kPack);
  ASSERT_TRUE(s_.remove_placement_group(id).ok());
  EXPECT_EQ(all_available(), before);
  EXPECT_TRUE(s_.groups().empty());
}

// ---------------------------------------------------------- actors in groups

TEST_F(SchedulerTest, GroupedActorsDrawFromTheirBundle) {
  add_three_nodes();
  PlacementGroupId id = create({R("CPU=2"), R("CPU=1")}, PlacementStrategy::kStrictSpread);
  Scheduler::GroupInfo g = info(id);
  ASSERT_TRUE(g.placed);
  auto before = all_available();

  absl::StatusOr<Placement> p = place_in(id, 0, "CPU=1.5");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->node, g.bundle_nodes[0]);
  EXPECT_EQ(p->group, id);
  EXPECT_EQ(p->bundle_index, 0);
  EXPECT_EQ(all_available(), before);  // the node's free pool is untouched
  EXPECT_EQ(info(id).bundle_available[0], R("CPU=0.5"));

  absl::StatusOr<Placement> no_room = place_in(id, 0, "CPU=1");
  EXPECT_EQ(no_room.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(no_room.status().message().find("CPU=0.5"), absl::string_view::npos)
      << no_room.status();
  EXPECT_EQ(place_in(id, 1, "CPU=2").status().code(), absl::StatusCode::kInvalidArgument);

  s_.release_actor(*p, R("CPU=1.5"));
  EXPECT_EQ(info(id).bundle_available[0], R("CPU=2"));
  EXPECT_EQ(all_available(), before);
}

TEST_F(SchedulerTest, AnyBundlePicksTheFirstWithRoom) {
  add_three_nodes();
  PlacementGroupId id =
      create({R("CPU=1"), R("CPU=1,GPU=0"), R("CPU=2")}, PlacementStrategy::kStrictSpread);
  ASSERT_TRUE(info(id).placed);
  std::vector<int> bundles;
  for (int i = 0; i < 4; ++i) {
    absl::StatusOr<Placement> p = place_in(id, -1, "CPU=1");
    ASSERT_TRUE(p.ok()) << p.status();
    bundles.push_back(p->bundle_index);
    EXPECT_EQ(p->node, info(id).bundle_nodes[p->bundle_index]);
  }
  EXPECT_EQ(bundles, (std::vector<int>{0, 1, 2, 2}));
  EXPECT_EQ(place_in(id, -1, "CPU=1").status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(place_in(id, -1, "CPU=3").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(SchedulerTest, AnyBundleHonoursPinsAndExclusions) {
  add_three_nodes();
  PlacementGroupId id =
      create(std::vector<Resources>(3, R("CPU=1")), PlacementStrategy::kStrictSpread);
  Scheduler::GroupInfo g = info(id);
  ASSERT_TRUE(g.placed);
  NodeIndex last = g.bundle_nodes[2];
  absl::StatusOr<Placement> pinned = place_in(id, -1, "CPU=1", last);
  ASSERT_TRUE(pinned.ok()) << pinned.status();
  EXPECT_EQ(pinned->bundle_index, 2);
  EXPECT_EQ(place_in(id, 0, "CPU=1", last).status().code(), absl::StatusCode::kInvalidArgument);
  absl::StatusOr<Placement> p = s_.place_actor(
      {.resources = R("CPU=1"), .group = id, .bundle_index = -1}, {g.bundle_nodes[0]});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->bundle_index, 1);
}

TEST_F(SchedulerTest, GroupedActorErrors) {
  add_three_nodes();
  PlacementGroupId id = create({R("CPU=1")}, PlacementStrategy::kPack);
  EXPECT_EQ(place_in(id, 1, "CPU=1").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(place_in(id, -2, "CPU=1").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(place_in(PlacementGroupId{99}, 0, "CPU=1").status().code(),
            absl::StatusCode::kNotFound);
  PlacementGroupId pending = create({R("CPU=99")}, PlacementStrategy::kPack);
  EXPECT_EQ(place_in(pending, 0, "CPU=1").status().code(), absl::StatusCode::kUnavailable);
}

TEST_F(SchedulerTest, ActorReleasesAfterTheirGroupIsGoneAreIgnored) {
  add_three_nodes();
  PlacementGroupId id = create({R("CPU=2")}, PlacementStrategy::kPack);
  absl::StatusOr<Placement> p = place_in(id, 0, "CPU=2");
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(s_.remove_placement_group(id).ok());
  auto before = all_available();
  s_.release_actor(*p, R("CPU=2"));
  EXPECT_EQ(all_available(), before);
}

// -------------------------------------------------------------- node failure

TEST_F(SchedulerTest, RemovingANodeMakesItsGroupsPendingAndKeepsTheirOtherBundles) {
  add_three_nodes();
  PlacementGroupId spread =
      create(std::vector<Resources>(3, R("CPU=1")), PlacementStrategy::kStrictSpread, "spread");
  PlacementGroupId elsewhere = create({R("CPU=1")}, PlacementStrategy::kStrictPack);
  const Scheduler::GroupInfo first = info(spread);
  const NodeIndex elsewhere_node = info(elsewhere).bundle_nodes[0];
  // Lose a node of the spread group's but not the other group's.
  const int lost_b = first.bundle_nodes[0] != elsewhere_node ? 0 : 1;
  const int kept_b = 2;  // another bundle than lost_b
  const NodeIndex victim = first.bundle_nodes[lost_b];
  absl::StatusOr<Placement> kept = place_in(spread, kept_b, "CPU=1");
  absl::StatusOr<Placement> lost = place_in(spread, lost_b, "CPU=1");
  ASSERT_TRUE(kept.ok() && lost.ok());
  auto before = all_available();

  EXPECT_EQ(s_.remove_node(victim), std::vector<PlacementGroupId>{spread});
  Scheduler::GroupInfo g = info(spread);
  EXPECT_FALSE(g.placed);
  std::vector<bool> expect_lost(3, false);
  expect_lost[lost_b] = true;
  EXPECT_EQ(g.lost, expect_lost);
  EXPECT_TRUE(info(elsewhere).placed);
  // The survivors keep what the group reserved on them.
  for (NodeIndex n : s_.nodes())
    EXPECT_EQ(s_.available(n), before[n]) << "node " << n;
  // New actors wait while the group is pending.
  EXPECT_EQ(place_in(spread, kept_b, "CPU=0").status().code(), absl::StatusCode::kUnavailable);

  // The two survivors cannot take the lost bundle (strictly spread from the
  // others); a new node can, and only that bundle moves.
  EXPECT_TRUE(s_.retry_pending().empty());
  s_.add_node(4, R("CPU=4"));
  EXPECT_EQ(s_.retry_pending(), std::vector<PlacementGroupId>{spread});
  g = info(spread);
  ASSERT_TRUE(g.placed);
  std::vector<NodeIndex> expect_nodes = first.bundle_nodes;
  expect_nodes[lost_b] = 4;
  EXPECT_EQ(g.bundle_nodes, expect_nodes);
  EXPECT_EQ(g.lost, std::vector<bool>(3, false));
  EXPECT_EQ(s_.available(4), R("CPU=3"));

  // The lost bundle's actor is stale; the one that stayed is not.
  s_.release_actor(*lost, R("CPU=1"));
  EXPECT_EQ(info(spread).bundle_available[lost_b], R("CPU=1"));
  s_.release_actor(*kept, R("CPU=1"));
  EXPECT_EQ(info(spread).bundle_available[kept_b], R("CPU=1"));
}

TEST_F(SchedulerTest, RemovingANodeOfAPendingGroupLeavesItPending) {
  add_three_nodes();
  PlacementGroupId id =
      create(std::vector<Resources>(4, R("CPU=1")), PlacementStrategy::kStrictSpread);
  EXPECT_TRUE(s_.remove_node(1).empty());
  EXPECT_FALSE(info(id).placed);
}

TEST_F(SchedulerTest, AfterANodeLossOnlyTheLostBundlesArePlacedAgain) {
  add_three_nodes();
  PlacementGroupId id = create(std::vector<Resources>(2, R("CPU=4")), PlacementStrategy::kPack);
  ASSERT_TRUE(info(id).placed);
  const std::vector<NodeIndex> first = info(id).bundle_nodes;
  EXPECT_EQ(distinct(first).size(), 2u);
  // Losing one node: its bundle goes to the idle third node; the other stays.
  EXPECT_EQ(s_.remove_node(first[0]), std::vector<PlacementGroupId>{id});
  EXPECT_EQ(s_.retry_pending(), std::vector<PlacementGroupId>{id});
  const std::vector<NodeIndex> second = info(id).bundle_nodes;
  EXPECT_EQ(second[1], first[1]);
  EXPECT_NE(second[0], first[0]);
  // Losing another leaves one node, full with the bundle that stayed: the
  // lost one waits, and the kept one stays reserved.
  EXPECT_EQ(s_.remove_node(second[0]), std::vector<PlacementGroupId>{id});
  EXPECT_TRUE(s_.retry_pending().empty());
  ASSERT_EQ(s_.nodes().size(), 1u);
  EXPECT_EQ(s_.available(s_.nodes()[0]), R("CPU=0"));
  // Losing the last one too: nothing is held, and the group is placed whole again.
  EXPECT_EQ(s_.remove_node(second[1]), std::vector<PlacementGroupId>{id});
  EXPECT_TRUE(info(id).bundle_nodes.empty());
  s_.add_node(7, R("CPU=8"));
  EXPECT_EQ(s_.retry_pending(), std::vector<PlacementGroupId>{id});
  EXPECT_EQ(info(id).bundle_nodes, (std::vector<NodeIndex>{7, 7}));
}

// ------------------------------------------------- against a brute-force search

// Whether some assignment of bundles to nodes satisfies capacity (and, for the
// strict strategies, the node constraint). Enumerates every assignment.
bool feasible(const std::vector<Resources>& free, const std::vector<Resources>& bundles,
              PlacementStrategy strategy) {
  std::vector<size_t> where(bundles.size(), 0);
  std::function<bool(size_t)> next = [&](size_t b) -> bool {
    if (b == bundles.size()) {
      std::vector<Resources> load(free.size());
      for (size_t i = 0; i < bundles.size(); ++i)
        load[where[i]] += bundles[i];
      for (size_t n = 0; n < free.size(); ++n) {
        if (!free[n].contains(load[n])) return false;
      }
      std::set<size_t> used(where.begin(), where.end());
      if (strategy == PlacementStrategy::kStrictPack) return used.size() == 1;
      if (strategy == PlacementStrategy::kStrictSpread) return used.size() == bundles.size();
      return true;
    }
    for (size_t n = 0; n < free.size(); ++n) {
      where[b] = n;
      if (next(b + 1)) return true;
    }
    return false;
  };
  return next(0);
}

Resources random_resources(std::mt19937& rng, int max_cpu, int max_gpu) {
  Resources r;
  r.set("CPU", std::uniform_int_distribution<int>(0, max_cpu)(rng));
  r.set("GPU", std::uniform_int_distribution<int>(0, max_gpu)(rng));
  return r;
}

TEST(SchedulerReferenceTest, PlacesExactlyWhenSomeAssignmentExists) {
  std::mt19937 rng(20240611);
  const PlacementStrategy strategies[] = {PlacementStrategy::kPack, PlacementStrategy::kSpread,
                                          PlacementStrategy::kStrictPack,
                                          PlacementStrategy::kStrictSpread};
  int placed_count = 0;
  for (int trial = 0; trial < 400; ++trial) {
    Scheduler s;
    std::vector<Resources> free;
    const int node_count = std::uniform_int_distribution<int>(1, 4)(rng);
    for (int n = 0; n < node_count; ++n) {
      free.push_back(random_resources(rng, 6, 2));
      s.add_node(static_cast<NodeIndex>(n), free.back());
    }
    std::vector<Resources> bundles;
    const int bundle_count = std::uniform_int_distribution<int>(1, 5)(rng);
    for (int b = 0; b < bundle_count; ++b) {
      Resources r = random_resources(rng, 3, 1);
      if (r.empty()) r.set("CPU", 1);
      bundles.push_back(r);
    }
    PlacementStrategy strategy = strategies[trial % 4];
    absl::StatusOr<PlacementGroupId> id = s.create_placement_group(bundles, strategy);
    ASSERT_TRUE(id.ok());
    Scheduler::GroupInfo g = *s.group(*id);
    std::string context = absl::StrCat("trial ", trial, " ", std::string(to_string(strategy)));
    ASSERT_EQ(g.placed, feasible(free, bundles, strategy)) << context;
    if (!g.placed) {
      for (int n = 0; n < node_count; ++n)
        EXPECT_EQ(s.available(n), free[n]) << context;
      continue;
    }
    ++placed_count;
    // The ledger: each node's free pool lost exactly the bundles placed on it.
    std::vector<Resources> expect = free;
    for (int b = 0; b < bundle_count; ++b)
      expect[g.bundle_nodes[b]] -= bundles[b];
    for (int n = 0; n < node_count; ++n) {
      EXPECT_EQ(s.available(n), expect[n]) << context;
      EXPECT_FALSE(s.available(n).any_negative()) << context;
    }
    const size_t used = distinct(g.bundle_nodes).size();
    if (strategy == PlacementStrategy::kStrictPack) {
      EXPECT_EQ(used, 1u) << context;
    }
    if (strategy == PlacementStrategy::kStrictSpread) {
      EXPECT_EQ(used, bundles.size()) << context;
    }
    if (strategy == PlacementStrategy::kSpread &&
        feasible(free, bundles, PlacementStrategy::kStrictSpread)) {
      EXPECT_EQ(used, bundles.size()) << context;  // distinct whenever possible
    }
    if (strategy == PlacementStrategy::kPack &&
        feasible(free, bundles, PlacementStrategy::kStrictPack)) {
      EXPECT_EQ(used, 1u) << context;  // one node whenever possible
    }
    ASSERT_TRUE(s.remove_placement_group(*id).ok());
    for (int n = 0; n < node_count; ++n)
      EXPECT_EQ(s.available(n), free[n]) << context;
  }
  EXPECT_GT(placed_count, 50);  // the trials exercise placement, not just refusal
}

TEST_F(SchedulerTest, GroupThatFitsNoIdleClusterIsInfeasibleNamingTheShortfall) {
  s_.add_node(1, R("CPU=2"));
  s_.add_node(2, R("CPU=2"));
  PlacementGroupId big =
      create(std::vector<Resources>(8, R("CPU=1")), PlacementStrategy::kSpread, "job/replicas");
  EXPECT_FALSE(info(big).placed);
  absl::Status s = s_.check_feasible(big);
  EXPECT_TRUE(absl::IsResourceExhausted(s)) << s;
  EXPECT_NE(s.message().find("'job/replicas' can never be placed"), std::string::npos) << s;
  EXPECT_NE(s.message().find("need {CPU=8} in all; the 2 worker nodes have {CPU=4}"),
            std::string::npos)
      << s;
  // Strict spread over more bundles than nodes, and strict pack beyond a node.
  EXPECT_TRUE(absl::IsResourceExhausted(s_.check_feasible(
      create({R("CPU=1"), R("CPU=1"), R("CPU=1")}, PlacementStrategy::kStrictSpread))));
  EXPECT_TRUE(absl::IsResourceExhausted(
      s_.check_feasible(create({R("CPU=2"), R("CPU=1")}, PlacementStrategy::kStrictPack))));
  // A node joining makes the first one feasible (not yet placed: it needs four).
  s_.add_node(3, R("CPU=4"));
  EXPECT_TRUE(s_.check_feasible(big).ok());
  EXPECT_TRUE(absl::IsNotFound(s_.check_feasible(PlacementGroupId{999})));
}

TEST_F(SchedulerTest, BusyButFeasibleGroupWaits) {
  s_.add_node(1, R("CPU=2"));
  ASSERT_TRUE(s_.place_actor({.resources = R("CPU=2")}).ok());
  PlacementGroupId g = create({R("CPU=2")}, PlacementStrategy::kPack);
  EXPECT_FALSE(info(g).placed);
  EXPECT_TRUE(s_.check_feasible(g).ok());  // it fits once the actor is gone
}

TEST_F(SchedulerTest, GivenGroupIdsAreKeptAndNeverReused) {
  s_.add_node(1, R("CPU=4"));
  auto given =
      s_.create_placement_group({R("CPU=1")}, PlacementStrategy::kPack, "", PlacementGroupId{100});
  ASSERT_TRUE(given.ok()) << given.status();
  EXPECT_EQ(given->value, 100u);
  EXPECT_TRUE(absl::IsAlreadyExists(
      s_.create_placement_group({R("CPU=1")}, PlacementStrategy::kPack, "", PlacementGroupId{100})
          .status()));
  EXPECT_GT(create({R("CPU=1")}, PlacementStrategy::kPack).value, 100u);
}

// --------------------------------------------------------- draining, targets

TEST_F(SchedulerTest, ADrainingNodeTakesNoNewActorsOrBundles) {
  add_three_nodes();
  PlacementGroupId before =
      create({R("CPU=1"), R("CPU=1"), R("CPU=1")}, PlacementStrategy::kSpread);
  s_.set_draining(2, true);
  EXPECT_TRUE(s_.draining(2));
  // New ungrouped actors and new groups go elsewhere.
  for (int i = 0; i < 2; ++i)
    EXPECT_NE(place("CPU=1").node, 2u);
  PlacementGroupId after = create({R("CPU=1"), R("CPU=1")}, PlacementStrategy::kSpread);
  for (NodeIndex n : info(after).bundle_nodes)
    EXPECT_NE(n, 2u);
  // Where nothing has room, the error counts it as draining, not as room.
  absl::StatusOr<Placement> none = s_.place_actor({.resources = R("CPU=100")}, {});
  EXPECT_TRUE(absl::IsResourceExhausted(none.status())) << none.status();
  EXPECT_TRUE(absl::StrContains(none.status().message(),
                                "any of 2 eligible nodes (0 excluded, 1 draining)"))
      << none.status();
  // A bundle placed there before still serves its actors, and a pin is kept.
  std::vector<NodeIndex> nodes = info(before).bundle_nodes;
  const int on_two = static_cast<int>(std::find(nodes.begin(), nodes.end(), 2u) - nodes.begin());
  ASSERT_LT(on_two, 3);
  absl::StatusOr<Placement> in_bundle = place_in(before, on_two, "CPU=1");
  ASSERT_TRUE(in_bundle.ok()) << in_bundle.status();
  EXPECT_EQ(in_bundle->node, 2u);
  EXPECT_EQ(place("CPU=1", NodeIndex{2}).node, 2u);
  // Once it takes work again, it gets its share.
  s_.set_draining(2, false);
  EXPECT_FALSE(s_.draining(2));
  PlacementGroupId again =
      create({R("CPU=1"), R("CPU=1"), R("CPU=1")}, PlacementStrategy::kStrictSpread);
  EXPECT_TRUE(info(again).placed);
}

TEST_F(SchedulerTest, SoftTargetsPlaceSpreadBundlesOnTheirNodesWhereTheyHaveRoom) {
  add_three_nodes("CPU=2");
  // Node 3 would be SPREAD's last choice (all equal, lowest first); targets win.
  auto targeted = s_.create_placement_group({R("CPU=1"), R("CPU=1")}, PlacementStrategy::kSpread,
                                            "grow", std::nullopt, {NodeIndex{3}, std::nullopt});
  ASSERT_TRUE(targeted.ok()) << targeted.status();
  std::vector<NodeIndex> nodes = info(*targeted).bundle_nodes;
  EXPECT_EQ(nodes[0], 3u);
  EXPECT_NE(nodes[1], 3u) << "the untargeted bundle is spread away from the targeted node";
  // A target without room falls back to the strategy.
  place("CPU=1", NodeIndex{1});  // (the untargeted bundle holds its other CPU)
  auto full = s_.create_placement_group({R("CPU=1")}, PlacementStrategy::kSpread, "", std::nullopt,
                                        {NodeIndex{1}});
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_TRUE(info(*full).placed);
  EXPECT_NE(info(*full).bundle_nodes[0], 1u);
  // Targets belong to SPREAD groups, one per bundle.
  EXPECT_TRUE(
      absl::IsInvalidArgument(s_.create_placement_group({R("CPU=1")}, PlacementStrategy::kPack, "",
                                                        std::nullopt, {NodeIndex{2}})
                                  .status()));
  EXPECT_TRUE(absl::IsInvalidArgument(s_.create_placement_group({R("CPU=1"), R("CPU=1")},
                                                                PlacementStrategy::kSpread, "",
                                                                std::nullopt, {NodeIndex{2}})
                                          .status()));
}

}  // namespace
}  // namespace troupe::cluster
