// Heads taking the lead on a real etcd (tests/cluster/etcd_fixture.h): one
// leads at a time, a standby takes over when the leader's lease lapses or it
// resigns, epochs only grow, and a deposed leader - paused, then awake -
// cannot write.
#include "core/cluster/detail/etcd_leadership.h"

#include <gtest/gtest.h>

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

TEST_F(EtcdLeadershipTest, ACandidateThatNeverLedCannotWrite) {
  auto a = candidate(*client_, "head-a");
  EXPECT_TRUE(absl::IsFailedPrecondition(a->write({EtcdOp::put("k", "v")}).status()));
}

}  // namespace
}  // namespace troupe::cluster
