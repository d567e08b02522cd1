// Heads taking the lead on a real etcd (tests/cluster/etcd_fixture.h): one
// leads at a time, a standby takes over when the leader's lease lapses or it
// resigns, epochs only grow, and a deposed leader - paused, then awake -
// cannot write.
#include "core/cluster/detail/etcd_leadership.h"

#include <signal.h>

#include <gtest/gtest.h>

#include <set>

#include "core/cluster/detail/head_ids.h"
#include "core/cluster/detail/head_store.h"
#include "tests/cluster/etcd_fixture.h"

namespace troupe::cluster {
namespace {

using EtcdLeadershipTest = EtcdTest;

std::unique_ptr<EtcdLeadership> candidate(const EtcdClient& etcd, const std::string& name) {
  return std::make_unique<EtcdLeadership>(etcd,
                                          LeadershipOptions{.name = name, .ttl = absl::Seconds(2)});
}

TEST_F(EtcdLeadershipTest, OneLeadsAndTheOtherWaits) {
  auto a = candidate(*client_, "head-a");
  auto b = candidate(*client_, "head-b");
  absl::StatusOr<int64_t> epoch = a->campaign(absl::Seconds(5));
  ASSERT_TRUE(epoch.ok()) << epoch.status();
  EXPECT_TRUE(a->leading());
  absl::StatusOr<int64_t> other = b->campaign(absl::Seconds(3));  // a renews meanwhile
  EXPECT_TRUE(absl::IsDeadlineExceeded(other.status())) << other.status();
  EXPECT_NE(other.status().message().find("head-a leads"), std::string::npos) << other.status();
  EXPECT_FALSE(b->leading());
  EXPECT_EQ(*b->leader(), std::optional<std::string>("head-a"));
  EXPECT_TRUE(a->write({EtcdOp::put("troupe/jobs/1", "job")}).ok());
}

TEST_F(EtcdLeadershipTest, AStandbyLeadsOnceTheLeaderResignsWithAGreaterEpoch) {
  auto a = candidate(*client_, "head-a");
  auto b = candidate(*client_, "head-b");
  int64_t first = *a->campaign(absl::Seconds(5));
  a->resign();
  absl::Time asked = absl::Now();
  absl::StatusOr<int64_t> second = b->campaign(absl::Seconds(5));
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_GT(*second, first);
  EXPECT_LT(absl::Now() - asked, absl::Seconds(1));  // resigning revokes: no TTL to wait out
}

TEST_F(EtcdLeadershipTest, APausedLeaderIsReplacedAndCannotWriteWhenItWakes) {
  auto a = candidate(*client_, "head-a");
  auto b = candidate(*client_, "head-b");
  int64_t first = *a->campaign(absl::Seconds(5));
  a->stop_renewing();  // paused: it still believes it leads
  absl::StatusOr<int64_t> second = b->campaign(absl::Seconds(15));
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_GT(*second, first);
  // Awake again, the old leader writes as if nothing happened: refused.
  absl::StatusOr<EtcdTxnResult> stale = a->write({EtcdOp::put("troupe/jobs/1", "stale")});
  EXPECT_TRUE(absl::IsFailedPrecondition(stale.status())) << stale.status();
  EXPECT_NE(stale.status().message().find("head-b leads"), std::string::npos) << stale.status();
  EXPECT_FALSE(a->leading());
  EXPECT_FALSE((*client_->get("troupe/jobs/1")).has_value());
  ASSERT_TRUE(b->write({EtcdOp::put("troupe/jobs/1", "fresh")}).ok());
  EXPECT_EQ((*client_->get("troupe/jobs/1"))->value, "fresh");
}

TEST_F(EtcdLeadershipTest, IdsSurviveATakeoverAndADeposedHeadReservesNoMore) {
  auto a = candidate(*client_, "head-a");
  auto b = candidate(*client_, "head-b");
  ASSERT_TRUE(a->campaign(absl::Seconds(5)).ok());
  absl::StatusOr<HeadIds> ids_a =
      HeadIds::open(std::shared_ptr<HeadStore>(etcd_store(*client_, a.get(), "troupe/test/")));
  ASSERT_TRUE(ids_a.ok()) << ids_a.status();
  std::set<uint32_t> nodes_a;
  for (int i = 0; i < 20; ++i)
    nodes_a.insert(*ids_a->next_node());
  a->stop_renewing();
  ASSERT_TRUE(b->campaign(absl::Seconds(15)).ok());
  absl::StatusOr<HeadIds> ids_b =
      HeadIds::open(std::shared_ptr<HeadStore>(etcd_store(*client_, b.get(), "troupe/test/")));
  ASSERT_TRUE(ids_b.ok()) << ids_b.status();
  std::set<uint32_t> nodes_b;
  for (int i = 0; i < 20; ++i) {
    absl::StatusOr<uint32_t> n = ids_b->next_node();
    ASSERT_TRUE(n.ok()) << n.status();
    EXPECT_FALSE(nodes_a.contains(*n)) << "node " << *n << " handed out by both heads";
    nodes_b.insert(*n);
  }
  // The old head hands out what is left of its reserved block (no one else
  // will), then cannot reserve another.
  absl::Status refused;
  for (int i = 0; i < 100 && refused.ok(); ++i) {
    absl::StatusOr<uint32_t> n = ids_a->next_node();
    if (!n.ok()) {
      refused = n.status();
    } else {
      EXPECT_FALSE(nodes_b.contains(*n)) << "node " << *n << " handed out by both heads";
    }
  }
  EXPECT_TRUE(absl::IsFailedPrecondition(refused)) << refused;
}

// A leader cut off from etcd (etcd stopped here: the same to the leader as a
// partition) cannot tell whether its lease lapsed: once etcd has not
// answered its renewals for a whole TTL it steps down, so that it does not
// go on serving beside a standby that took over.
TEST_F(EtcdLeadershipTest, ALeaderCutOffFromEtcdStepsDownWithinItsLease) {
  auto a = candidate(*client_, "head-a");
  ASSERT_TRUE(a->campaign(absl::Seconds(5)).ok());
  ASSERT_EQ(::kill(etcd_->pid(), SIGSTOP), 0);
  const absl::Time cut = absl::Now();
  bool stepped_down = false;
  for (absl::Time deadline = cut + absl::Seconds(20); absl::Now() < deadline;
       absl::SleepFor(absl::Milliseconds(20))) {
    if (!a->leading()) {
      stepped_down = true;
      break;
    }
  }
  const absl::Duration took = absl::Now() - cut;
  ASSERT_EQ(::kill(etcd_->pid(), SIGCONT), 0);
  EXPECT_TRUE(stepped_down);
  // Within the TTL of its last renewal (sent at most a third of the TTL
  // before the cut), the next renewal's wait and its timeout (a third each):
  // 2 s + 1.3 s, with room for a loaded machine.
  EXPECT_LT(took, absl::Seconds(6)) << absl::FormatDuration(took);
}

TEST_F(EtcdLeadershipTest, ACandidateThatNeverLedCannotWrite) {
  auto a = candidate(*client_, "head-a");
  EXPECT_TRUE(absl::IsFailedPrecondition(a->write({EtcdOp::put("k", "v")}).status()));
}

}  // namespace
}  // namespace troupe::cluster
