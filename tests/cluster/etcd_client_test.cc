// The etcd client (core/cluster/detail/etcd_client.h) against a real etcd
// started by the test (tests/cluster/etcd_fixture.h).
#include "core/cluster/detail/etcd_client.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "tests/cluster/etcd_fixture.h"

namespace troupe::cluster {
namespace {

using EtcdClientTest = EtcdTest;

TEST_F(EtcdClientTest, PutAndGetRoundTripAnyBytes) {
  std::string key("troupe/a\0b", 10);
  std::string value;
  for (int b = 0; b < 256; ++b)
    value += static_cast<char>(b);
  absl::StatusOr<int64_t> revision = client_->put(key, value);
  ASSERT_TRUE(revision.ok()) << revision.status();
  absl::StatusOr<std::optional<EtcdKv>> got = client_->get(key);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ((*got)->key, key);
  EXPECT_EQ((*got)->value, value);
  EXPECT_EQ((*got)->mod_revision, *revision);
  EXPECT_EQ((*got)->version, 1);
  absl::StatusOr<std::optional<EtcdKv>> absent = client_->get("troupe/nothing");
  ASSERT_TRUE(absent.ok()) << absent.status();
  EXPECT_FALSE(absent->has_value());
}

TEST_F(EtcdClientTest, PrefixesReadAndDeleteOnlyTheirKeys) {
  for (const char* key : {"jobs/2", "jobs/1", "jobz/1", "kv/1"})
    ASSERT_TRUE(client_->put(key, key).ok());
  absl::StatusOr<std::vector<EtcdKv>> jobs = client_->get_prefix("jobs/");
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 2u);
  EXPECT_EQ((*jobs)[0].key, "jobs/1");  // in key order
  EXPECT_EQ((*jobs)[1].key, "jobs/2");
  absl::StatusOr<int64_t> deleted = client_->delete_prefix("jobs/");
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_EQ(*deleted, 2);
  EXPECT_TRUE(client_->get_prefix("jobs/")->empty());
  EXPECT_EQ(client_->get_prefix("job")->size(), 1u);
}

TEST_F(EtcdClientTest, ATransactionCreatesAKeyOnlyIfAbsent) {
  auto take = [&](const std::string& who) {
    EtcdTxn t;
    t.compares.push_back(EtcdCompare::absent("troupe/leader"));
    t.success.push_back(EtcdOp::put("troupe/leader", who));
    t.failure.push_back(EtcdOp::get("troupe/leader"));
    return client_->txn(t);
  };
  absl::StatusOr<EtcdTxnResult> first = take("head-1");
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(first->succeeded);
  absl::StatusOr<EtcdTxnResult> second = take("head-2");
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_FALSE(second->succeeded);
  ASSERT_EQ(second->ranges.size(), 1u);
  ASSERT_EQ(second->ranges[0].size(), 1u);
  EXPECT_EQ(second->ranges[0][0].value, "head-1");  // who holds it
}

TEST_F(EtcdClientTest, AWriteConditionalOnARevisionRefusesAStaleWriter) {
  ASSERT_TRUE(client_->put("troupe/epoch", "1").ok());
  int64_t seen = (*client_->get("troupe/epoch"))->mod_revision;
  auto write = [&](const std::string& value) {
    EtcdTxn t;
    t.compares.push_back(EtcdCompare::mod_revision_is("troupe/epoch", seen));
    t.success.push_back(EtcdOp::put("troupe/epoch", value));
    return client_->txn(t);
  };
  absl::StatusOr<EtcdTxnResult> a = write("2");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_TRUE(a->succeeded);
  absl::StatusOr<EtcdTxnResult> b = write("2b");  // saw the same revision: too late
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_FALSE(b->succeeded);
  EXPECT_EQ((*client_->get("troupe/epoch"))->value, "2");
  EtcdTxn by_value;
  by_value.compares.push_back(EtcdCompare::value_is("troupe/epoch", "2"));
  by_value.success.push_back(EtcdOp::delete_key("troupe/epoch"));
  absl::StatusOr<EtcdTxnResult> c = client_->txn(by_value);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->succeeded);
  EXPECT_FALSE(client_->get("troupe/epoch")->has_value());
}

TEST_F(EtcdClientTest, ALeaseKeepsItsKeysWhileRenewedAndTakesThemWhenItLapses) {
  absl::StatusOr<int64_t> lease = client_->grant_lease(absl::Seconds(2));
  ASSERT_TRUE(lease.ok()) << lease.status();
  ASSERT_TRUE(client_->put("troupe/leader", "head-1", *lease).ok());
  EXPECT_EQ((*client_->get("troupe/leader"))->lease, *lease);
  // Renewed for twice its TTL: still there.
  for (absl::Time until = absl::Now() + absl::Seconds(4); absl::Now() < until;) {
    ASSERT_TRUE(client_->keep_alive(*lease).ok());
    absl::SleepFor(absl::Milliseconds(500));
  }
  EXPECT_TRUE(client_->get("troupe/leader")->has_value());
  // Left to lapse: the key goes with it.
  bool gone = false;
  for (absl::Time until = absl::Now() + absl::Seconds(15); !gone && absl::Now() < until;) {
    absl::SleepFor(absl::Milliseconds(200));
    gone = !client_->get("troupe/leader")->has_value();
  }
  EXPECT_TRUE(gone);
  absl::Status renewed = client_->keep_alive(*lease);
  EXPECT_TRUE(absl::IsNotFound(renewed)) << renewed;
}

TEST_F(EtcdClientTest, RevokingALeaseDeletesItsKeysAtOnce) {
  absl::StatusOr<int64_t> lease = client_->grant_lease(absl::Seconds(30));
  ASSERT_TRUE(lease.ok()) << lease.status();
  ASSERT_TRUE(client_->put("troupe/leader", "head-1", *lease).ok());
  ASSERT_TRUE(client_->revoke_lease(*lease).ok());
  EXPECT_FALSE(client_->get("troupe/leader")->has_value());
  EXPECT_FALSE(client_->put("troupe/x", "y", *lease).ok());  // no such lease any more
}

TEST_F(EtcdClientTest, AnEndpointThatDoesNotAnswerIsSkipped) {
  const std::string dead = absl::StrCat("http://127.0.0.1:", free_loopback_port());
  auto both = EtcdClient::connect({dead, *endpoint_}, absl::Seconds(2));
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_TRUE(both->put("troupe/k", "v").ok());
  auto none = EtcdClient::connect({dead}, absl::Seconds(2));
  ASSERT_TRUE(none.ok()) << none.status();
  absl::StatusOr<int64_t> failed = none->put("troupe/k", "v");
  EXPECT_TRUE(absl::IsUnavailable(failed.status())) << failed.status();
  EXPECT_NE(failed.status().message().find(dead), std::string::npos) << failed.status();
}

TEST(EtcdEndpointsTest, MalformedEndpointsAreInvalidArgument) {
  for (const char* bad : {"https://10.0.0.1:2379", "10.0.0.1", "host:0", "host:http", ":2379"}) {
    auto c = EtcdClient::connect({bad});
    EXPECT_TRUE(absl::IsInvalidArgument(c.status())) << bad << ": " << c.status();
  }
  EXPECT_TRUE(absl::IsInvalidArgument(EtcdClient::connect({}).status()));
  EXPECT_TRUE(EtcdClient::connect({"10.0.0.1:2379", "http://[::1]:2379/"}).ok());
}

TEST(EtcdEndpointsTest, APrefixEndsAtTheNextKey) {
  EXPECT_EQ(etcd_prefix_end("jobs/"), "jobs0");
  EXPECT_EQ(etcd_prefix_end(std::string("a\xff", 2)), "b");
  EXPECT_EQ(etcd_prefix_end(""), std::string(1, '\0'));
}

}  // namespace
}  // namespace troupe::cluster
