// Failover (docs/fault_tolerance.md): three `troupe head` processes on one
// real etcd (started by the test; skipped where none is installed), one
// leading and two standing by, with worker processes and a driver given
// every head's address. The leader is SIGKILLed (its machine lost) or
// SIGSTOPped (paused) under load; a standby takes over, the nodes follow it,
// and nothing acknowledged is lost. Every wait has a deadline.
#include <signal.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <regex>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "core/cluster/cluster.h"
#include "core/cluster/detail/head.h"
#include "core/cluster/detail/node.h"
#include "core/cluster/local_cluster.h"
#include "tests/cluster/cluster_fixture.h"
#include "tests/cluster/etcd_fixture.h"
#include "tests/cluster/probe_actors.h"
#include "transport/auth.h"

namespace troupe::cluster {
namespace {

using troupe::testing::Probe;

constexpr absl::Duration kCallTimeout = absl::Seconds(20);
// How long a standby may take to lead once the leader is lost.
constexpr absl::Duration kTakeover = absl::Seconds(3);

class FailoverTest : public EtcdTest {
 protected:
  void SetUp() override {
    EtcdTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    LocalClusterOptions o = testing::probe_cluster({"CPU=2", "CPU=2"});
    o.heartbeat_timeout = absl::Seconds(2);
    o.store = absl::StrCat("etcd://", host_port(), "/",
                           ::testing::UnitTest::GetInstance()->current_test_info()->name(), "/");
    store_ = o.store;
    o.heads = 3;
    o.head_flags = {"--lease-ttl", "1s"};
    o.echo_output = false;
    auto local = LocalCluster::start(o);
    ASSERT_TRUE(local.ok()) << local.status();
    local_ = *std::move(local);
    ClusterOptions c = local_->client_options();
    c.timeout = absl::Seconds(5);
    auto driver = Cluster::connect(c);
    ASSERT_TRUE(driver.ok()) << driver.status();
    driver_ = *std::move(driver);
  }
  void TearDown() override {
    driver_.reset();
    local_.reset();
  }

  // The key record `key` of the KV store has in etcd, if any.
  std::optional<std::string> etcd_kv(const std::string& key) {
    const std::string prefix =
        absl::StrCat(::testing::UnitTest::GetInstance()->current_test_info()->name(), "/head/kv/");
    auto kv = client_->get(prefix + key);
    EXPECT_TRUE(kv.ok()) << kv.status();
    if (!kv.ok() || !kv->has_value()) return std::nullopt;
    return (*kv)->value;
  }

  bool wait_status(const std::function<bool(const ClusterStatus&)>& pred,
                   absl::Duration timeout = absl::Seconds(30)) {
    for (absl::Time deadline = absl::Now() + timeout; absl::Now() < deadline;
         absl::SleepFor(absl::Milliseconds(50))) {
      auto s = driver_->status();
      if (s.ok() && pred(*s)) return true;
    }
    return false;
  }
  static int alive_workers(const ClusterStatus& s) {
    int n = 0;
    for (const NodeStatus& node : s.nodes)
      n += node.state == NodeState::kAlive && node.info.kind == NodeKind::kWorker ? 1 : 0;
    return n;
  }

  std::string store_;  // the heads' --store
  std::unique_ptr<LocalCluster> local_;
  std::unique_ptr<Cluster> driver_;
};

// The losses of metrics.jsonl, in order, as written (bitwise: the text of
// each double is exact).
std::vector<std::string> losses(const std::string& path) {
  std::vector<std::string> out;
  std::ifstream in(path);
  const std::regex loss("\"loss\":([^,}]+)");
  std::smatch m;
  for (std::string line; std::getline(in, line);) {
    if (std::regex_search(line, m, loss)) out.push_back(m[1]);
  }
  return out;
}

size_t lines_of(const std::string& path) {
  std::ifstream in(path);
  size_t n = 0;
  for (std::string line; std::getline(in, line);)
    ++n;
  return n;
}

// The leader SIGKILLed mid-training: a standby leads within 3 s, the nodes
// rejoin it, and the job goes on to end bitwise equal to a run without the
// failure.
TEST_F(FailoverTest, LeaderKilledMidTrainingAStandbyLeadsAndTrainingEndsBitwiseEqual) {
  constexpr int kSteps = 200;
  char dir_a[] = "/tmp/troupe-failover-XXXXXX";
  char dir_b[] = "/tmp/troupe-failover-XXXXXX";
  ASSERT_NE(::mkdtemp(dir_a), nullptr);
  ASSERT_NE(::mkdtemp(dir_b), nullptr);

  auto [code_a, out_a] =
      local_->run_cli({"train", "--config", testing::fault_tolerant_job(dir_a, 2, kSteps)});
  ASSERT_EQ(code_a, 0) << out_a;

  std::pair<int, std::string> run_b;
  std::thread train([&] {
    run_b = local_->run_cli({"train", "--config", testing::fault_tolerant_job(dir_b, 2, kSteps)});
  });
  const std::string metrics_b = std::string(dir_b) + "/out/metrics.jsonl";
  bool started = false;
  for (absl::Time deadline = absl::Now() + absl::Seconds(120); absl::Now() < deadline;
       absl::SleepFor(absl::Milliseconds(20))) {
    if (lines_of(metrics_b) >= 10) {
      started = true;
      break;
    }
  }
  EXPECT_TRUE(started) << "training did not get to step 10";
  local_->kill_head(SIGKILL);
  auto took = local_->wait_for_new_leader(absl::Seconds(30));
  const size_t at_takeover = lines_of(metrics_b);
  train.join();
  ASSERT_TRUE(took.ok()) << took.status();
  EXPECT_LT(*took, kTakeover) << "a standby led only after " << absl::FormatDuration(*took);
  ASSERT_EQ(run_b.first, 0) << run_b.second;
  EXPECT_LT(at_takeover, static_cast<size_t>(kSteps)) << "the job ended before the takeover";

  std::vector<std::string> a = losses(std::string(dir_a) + "/out/metrics.jsonl");
  std::vector<std::string> b = losses(metrics_b);
  ASSERT_EQ(a.size(), static_cast<size_t>(kSteps));
  EXPECT_EQ(a, b) << "the run through the failover trained differently";
  EXPECT_TRUE(wait_status([](const ClusterStatus& s) { return alive_workers(s) == 2; }))
      << "the workers did not rejoin the new leader";
  std::filesystem::remove_all(dir_a);
  std::filesystem::remove_all(dir_b);
}

// Over many leader kills at random moments, under a stream of KV writes and
// placement groups, nothing acknowledged is lost: every acknowledged write
// is in etcd and in the leader's KV store, every acknowledged group exists.
TEST_F(FailoverTest, NoAcknowledgedWriteOrPlacementIsLostOverManyLeaderKills) {
  int kills = 100;
  if (const char* env = std::getenv("TROUPE_FAILOVER_KILLS")) kills = std::atoi(env);
  std::atomic<bool> done{false};
  std::map<std::string, std::string> acked;  // the writer thread's until joined
  std::set<uint64_t> groups;
  std::atomic<int> failed{0};
  std::thread writer([&] {
    for (int i = 0; !done.load() && i < 10000000; ++i) {
      const std::string key = absl::StrCat("k", i);
      const std::string value = absl::StrCat("v", i, "-", i * 7919);
      if (i % 10 == 9) {
        auto g = driver_->create_placement_group({"CPU=0.01"}, PlacementStrategy::kPack);
        if (g.ok()) {
          groups.insert(g->value);
        } else {
          failed++;
        }
        continue;
      }
      auto put = driver_->kv_put(key, value);
      if (put.ok() && *put) {
        acked[key] = value;
      } else {
        failed++;
        absl::SleepFor(absl::Milliseconds(20));
      }
    }
  });
  std::mt19937 random(42);
  absl::Duration slowest;
  int failovers = 0;
  for (int k = 0; k < kills; ++k) {
    absl::SleepFor(absl::Milliseconds(std::uniform_int_distribution<int>(20, 500)(random)));
    local_->kill_head(SIGKILL);
    auto took = local_->wait_for_new_leader(absl::Seconds(30));
    ASSERT_TRUE(took.ok()) << "kill " << k << ": " << took.status();
    slowest = std::max(slowest, *took);
    ++failovers;
    ASSERT_TRUE(local_->restart_head().ok()) << "kill " << k;
  }
  // Writes acknowledged by the last leader too.
  absl::SleepFor(absl::Milliseconds(500));
  done.store(true);
  writer.join();
  std::printf(
      "%d failovers (slowest %s), %zu writes and %zu placement groups acknowledged, %d "
      "refused\n",
      failovers, absl::FormatDuration(slowest).c_str(), acked.size(), groups.size(), failed.load());
  ASSERT_GT(acked.size(), static_cast<size_t>(kills));
  // Every one in etcd, and (one in 50) served by the leader.
  auto kept = client_->get_prefix(
      absl::StrCat(::testing::UnitTest::GetInstance()->current_test_info()->name(), "/head/kv/"));
  ASSERT_TRUE(kept.ok()) << kept.status();
  std::map<std::string, std::string> in_etcd;
  for (const EtcdKv& kv : *kept)
    in_etcd[kv.key.substr(kv.key.rfind('/') + 1)] = kv.value;
  int lost = 0, checked = 0;
  for (const auto& [key, value] : acked) {
    auto it = in_etcd.find(key);
    bool ok = it != in_etcd.end() && it->second == value;
    if (ok && ++checked % 50 == 0) {
      auto served = driver_->kv_get(key);
      ok = served.ok() && *served == value;
    }
    if (!ok && ++lost <= 5) ADD_FAILURE() << key << ": acknowledged " << value << ", lost";
  }
  EXPECT_EQ(lost, 0) << "acknowledged writes lost";
  auto s = driver_->status();
  ASSERT_TRUE(s.ok()) << s.status();
  std::set<uint64_t> present;
  for (const PlacementGroupStatus& g : s->placement_groups)
    present.insert(g.id);
  for (uint64_t g : groups)
    EXPECT_TRUE(present.contains(g)) << "acknowledged placement group " << g << " is lost";
}

// A leader paused (SIGSTOP) past its lease: a standby takes over; resumed,
// the old leader cannot write - a write sent straight to it is refused and
// reaches neither etcd nor the new leader - and it exits, saying so.
TEST_F(FailoverTest, PausedOldLeaderResumedAfterTheTakeoverCannotWrite) {
  const pid_t old = local_->head_pid();
  const std::string old_address = local_->leader_address();
  ASSERT_EQ(::kill(old, SIGSTOP), 0);
  auto took = local_->wait_for_new_leader(absl::Seconds(30));
  ASSERT_TRUE(took.ok()) << took.status();
  // Acknowledged by the new leader (once the driver follows it: until then
  // its calls go to a head that does not answer).
  absl::StatusOr<bool> put = absl::UnavailableError("not sent");
  for (absl::Time deadline = absl::Now() + absl::Seconds(30); !put.ok() && absl::Now() < deadline;)
    put = driver_->kv_put("after", "the new leader");
  ASSERT_TRUE(put.ok()) << put.status();

  // A client of the old leader alone, with the cluster's token.
  auto token = transport::read_token_file(local_->token_file());
  ASSERT_TRUE(token.ok()) << token.status();
  auto node = Node::start({.index = kUnassignedNode,
                           .token = *token,
                           .name = "stale client",
                           .transports = {"tcp"},
                           .threads = 1,
                           .connect_timeout = absl::Seconds(10)});
  ASSERT_TRUE(node.ok()) << node.status();
  (*node)->set_node_endpoints(kHeadNode, {"tcp://" + old_address});
  auto old_head = (*node)->ref<HeadService>(head_service_id(), kHeadNode);
  // Sent while it is stopped; it reads it when resumed.
  Future<bool> stale = old_head.call(&HeadService::kv_put, std::string("stale"),
                                     std::string("the old leader"), true);
  absl::SleepFor(absl::Milliseconds(100));
  ASSERT_EQ(::kill(old, SIGCONT), 0);
  auto answer = stale.get(kCallTimeout);
  EXPECT_FALSE(answer.ok()) << "the old leader acknowledged a write after it was deposed";
  EXPECT_EQ(etcd_kv("stale"), std::nullopt) << "the old leader wrote to etcd after it was deposed";
  auto served = driver_->kv_get("stale");
  ASSERT_TRUE(served.ok()) << served.status();
  EXPECT_EQ(*served, std::nullopt);
  EXPECT_EQ(etcd_kv("after"), std::optional<std::string>("the new leader"));
  EXPECT_EQ(local_->deposed_exit_code(absl::Seconds(20)), std::optional<int>(3))
      << "the deposed leader did not exit saying it lost its head role";
}

// What the leader kept outlives it: an actor on a node that rejoins is taken
// back with its name, and one whose node is lost with the leader is
// restarted elsewhere by the new leader (the same ActorId), from the record
// alone.
TEST_F(FailoverTest, ActorsTheLeaderKeptAreTakenBackOrRestartedByTheNewOne) {
  auto moving = driver_->spawn<Probe>({.max_restarts = 1}, std::string("moving"));
  ASSERT_TRUE(moving.ok()) << moving.status();
  auto s = driver_->status();
  ASSERT_TRUE(s.ok()) << s.status();
  uint32_t doomed = 0;
  for (const ActorStatus& a : s->actors)
    if (a.id == moving->id().value) doomed = a.node;
  const int doomed_worker = local_->worker_node(0) == doomed ? 0 : 1;
  const int surviving_worker = 1 - doomed_worker;
  ASSERT_EQ(local_->worker_node(doomed_worker), doomed);
  auto kept = driver_->spawn<Probe>(
      {.name = "kept", .node = static_cast<int>(local_->worker_node(surviving_worker))},
      std::string("kept"));
  ASSERT_TRUE(kept.ok()) << kept.status();

  // The leader and the moving actor's machine go together.
  local_->kill_head(SIGKILL);
  local_->kill_worker(doomed_worker, SIGKILL);
  auto took = local_->wait_for_new_leader(absl::Seconds(30));
  ASSERT_TRUE(took.ok()) << took.status();

  absl::StatusOr<ActorRef<Probe>> found = absl::UnavailableError("not asked");
  for (absl::Time deadline = absl::Now() + absl::Seconds(30); !found.ok() && absl::Now() < deadline;
       absl::SleepFor(absl::Milliseconds(50))) {
    found = driver_->get_actor<Probe>("kept");
  }
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(found->id(), kept->id());
  EXPECT_EQ(*found->call(&Probe::tag).get(kCallTimeout), "kept");
  // Restarted on the surviving worker once the grace for its node ran out.
  absl::StatusOr<int> restarts = absl::UnavailableError("not asked");
  for (absl::Time deadline = absl::Now() + absl::Seconds(60); absl::Now() < deadline;
       absl::SleepFor(absl::Milliseconds(100))) {
    restarts = moving->call(&Probe::restarts).get(kCallTimeout);
    if (restarts.ok()) break;
  }
  ASSERT_TRUE(restarts.ok()) << restarts.status();
  EXPECT_EQ(*restarts, 1);
  EXPECT_TRUE(wait_status([&](const ClusterStatus& st) {
    for (const ActorStatus& a : st.actors) {
      if (a.id == moving->id().value) {
        return a.state == ActorState::kAlive && a.node == local_->worker_node(surviving_worker);
      }
    }
    return false;
  }));
}

// A worker that starts while the leader is down and no standby leads yet
// waits, and joins the standby that takes over.
TEST_F(FailoverTest, WorkerJoiningDuringTheTakeoverJoinsTheNewLeader) {
  local_->kill_head(SIGKILL);
  auto added = local_->add_worker("CPU=1");
  ASSERT_TRUE(added.ok()) << added.status();
  auto took = local_->wait_for_new_leader(absl::Seconds(30));
  ASSERT_TRUE(took.ok()) << took.status();
  const uint32_t node = local_->worker_node(*added);
  EXPECT_TRUE(wait_status([&](const ClusterStatus& s) {
    if (alive_workers(s) != 3) return false;
    for (const NodeStatus& n : s.nodes) {
      if (n.info.index == node) return n.state == NodeState::kAlive && n.ready;
    }
    return false;
  })) << "the worker that joined during the takeover is not the new leader's";
  // It hosts actors for it.
  auto probe = driver_->spawn<Probe>({.node = static_cast<int>(node)}, std::string("late"));
  ASSERT_TRUE(probe.ok()) << probe.status();
  EXPECT_EQ(*probe->call(&Probe::tag).get(kCallTimeout), "late");
  // The CLI, given every head, asks the one that leads.
  auto [code, out] = local_->run_cli({"status"});
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("took over"), std::string::npos) << out;
}

// A driver and the CLI given the heads' etcd instead of every head ask it
// which head leads, and follow a takeover.
TEST_F(FailoverTest, ADriverAndTheCliGivenTheEtcdFollowTheLeader) {
  ClusterOptions options = local_->client_options();
  options.head = store_;
  options.timeout = absl::Seconds(5);
  auto other = Cluster::connect(options);
  ASSERT_TRUE(other.ok()) << other.status();
  auto before = (*other)->kv_put("before", "1");
  ASSERT_TRUE(before.ok()) << before.status();

  local_->kill_head(SIGKILL);
  auto took = local_->wait_for_new_leader(absl::Seconds(30));
  ASSERT_TRUE(took.ok()) << took.status();
  absl::StatusOr<bool> after = absl::UnavailableError("not sent");
  for (absl::Time deadline = absl::Now() + absl::Seconds(30); !after.ok() && absl::Now() < deadline;
       absl::SleepFor(absl::Milliseconds(50))) {
    after = (*other)->kv_put("after", "2");
  }
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(*(*other)->kv_get("before"), std::optional<std::string>("1"));
  auto [code, out] = local_->run_cli({"status", "--head", store_});
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("took over"), std::string::npos) << out;
}

}  // namespace
}  // namespace troupe::cluster
