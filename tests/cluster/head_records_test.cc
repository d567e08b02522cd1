// The head's records on a real etcd (tests/cluster/etcd_fixture.h): written
// in order through the RecordWriter, each change answered once committed,
// read back whole by a head that takes over; a deposed leader's changes all
// fail, and nothing of them is written. And the state directory, which keeps
// no records, answers at once.
#include "core/cluster/detail/head_records.h"

#include <gtest/gtest.h>

#include <atomic>

#include "core/cluster/detail/etcd_leadership.h"
#include "core/cluster/detail/head_store.h"
#include "tests/cluster/etcd_fixture.h"

namespace troupe::cluster {
namespace {

using HeadRecordsTest = EtcdTest;

struct Leader {
  std::unique_ptr<EtcdLeadership> leadership;
  std::shared_ptr<HeadStore> store;
};

Leader lead(const EtcdClient& etcd, const std::string& name) {
  Leader l;
  l.leadership = std::make_unique<EtcdLeadership>(
      etcd, LeadershipOptions{.name = name, .ttl = absl::Seconds(2)});
  EXPECT_TRUE(l.leadership->campaign(absl::Seconds(10)).ok());
  l.store = std::shared_ptr<HeadStore>(etcd_store(etcd, l.leadership.get(), "troupe/head/"));
  return l;
}

TEST_F(HeadRecordsTest, ChangesCommitInOrderAndAHeadThatTakesOverReadsThemBack) {
  Leader a = lead(*client_, "head-a");
  HeadRecords kept;
  {
    RecordWriter writer(a.store, nullptr);
    ASSERT_TRUE(writer.keeps_records());
    NodeInfo node;
    node.index = 7;
    node.name = "worker 7";
    node.resources = "CPU=4";
    StoredActor actor;
    actor.spawn.type = "Probe";
    actor.spawn.name = "kept";
    actor.node = 7;
    actor.restarts = 1;
    StoredGroup group;
    group.bundles = {"CPU=1", "CPU=1"};
    group.strategy = "SPREAD";
    group.job = 3;
    std::vector<Future<void>> done;
    done.push_back(writer.put(node_record(7), encode_record(node)));
    done.push_back(writer.put(actor_record(0x1234), encode_record(actor)));
    done.push_back(writer.put(group_record(9), encode_record(group)));
    done.push_back(writer.put(job_record(3), encode_record(StoredJob{.driver = node})));
    done.push_back(writer.put(kv_record("a"), "1"));
    done.push_back(writer.put(kv_record("a"), "2"));  // the same record twice in a batch
    done.push_back(writer.put(kv_record("b"), "x"));
    done.push_back(writer.erase(kv_record("b")));
    for (Future<void>& f : done)
      EXPECT_TRUE(f.get(absl::Seconds(10)).ok());
    EXPECT_GE(writer.commits(), 1u);
  }
  a.leadership->resign();
  Leader b = lead(*client_, "head-b");
  absl::StatusOr<HeadRecords> read = load_head_records(*b.store);
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->nodes.size(), 1u);
  EXPECT_EQ(read->nodes.at(7).name, "worker 7");
  EXPECT_EQ(read->nodes.at(7).resources, "CPU=4");
  ASSERT_EQ(read->actors.size(), 1u);
  EXPECT_EQ(read->actors.at(0x1234).spawn.name, "kept");
  EXPECT_EQ(read->actors.at(0x1234).restarts, 1);
  ASSERT_EQ(read->groups.size(), 1u);
  EXPECT_EQ(read->groups.at(9).bundles, (std::vector<std::string>{"CPU=1", "CPU=1"}));
  EXPECT_EQ(read->groups.at(9).job, 3u);
  ASSERT_EQ(read->jobs.size(), 1u);
  EXPECT_EQ(read->jobs.at(3).state, JobState::kRunning);
  EXPECT_EQ(read->kv, (std::map<std::string, std::string>{{"a", "2"}}));
}

TEST_F(HeadRecordsTest, ADeposedLeadersChangesAllFailAndNoneIsWritten) {
  Leader a = lead(*client_, "head-a");
  a.leadership->stop_renewing();  // paused
  Leader b = lead(*client_, "head-b");
  ASSERT_TRUE(b.leadership->leading());
  std::atomic<int> failures{0};
  RecordWriter writer(a.store, [&](absl::Status s) {
    EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
    failures++;
  });
  Future<void> first = writer.put(kv_record("stale"), "1");
  absl::Status s = first.get(absl::Seconds(10));
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  // Later ones fail at once.
  absl::Status later = writer.put(kv_record("later"), "2").get(absl::Seconds(10));
  EXPECT_FALSE(later.ok());
  EXPECT_EQ(failures.load(), 1);
  EXPECT_EQ(*client_->get("troupe/head/kv/stale"), std::nullopt);
  EXPECT_EQ(*client_->get("troupe/head/kv/later"), std::nullopt);
}

TEST_F(HeadRecordsTest, ThousandsOfChangesGoInFewTransactions) {
  Leader a = lead(*client_, "head-a");
  RecordWriter writer(a.store, nullptr);
  std::vector<Future<void>> done;
  for (int i = 0; i < 2000; ++i)
    done.push_back(writer.put(kv_record(absl::StrCat("k", i)), absl::StrCat(i)));
  for (Future<void>& f : done)
    ASSERT_TRUE(f.get(absl::Seconds(30)).ok());
  EXPECT_EQ(writer.changes_committed(), 2000u);
  // At most 100 a transaction; one per change would be 2,000.
  EXPECT_GE(writer.commits(), 20u);
  EXPECT_LT(writer.commits(), 200u);
  auto all = client_->get_prefix("troupe/head/kv/");
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->size(), 2000u);
}

TEST(HeadRecordsLocalTest, TheStateDirectoryKeepsNoRecordsAndAnswersAtOnce) {
  std::shared_ptr<HeadStore> store(state_dir_store(""));
  RecordWriter writer(store, nullptr);
  EXPECT_FALSE(writer.keeps_records());
  Future<void> f = writer.put(kv_record("a"), "1");
  EXPECT_TRUE(f.ready());
  EXPECT_TRUE(f.get().ok());
  absl::StatusOr<HeadRecords> read = load_head_records(*store);
  ASSERT_TRUE(read.ok());
  EXPECT_TRUE(read->kv.empty());
}

}  // namespace
}  // namespace troupe::cluster
