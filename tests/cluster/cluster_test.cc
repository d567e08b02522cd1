// A real cluster: a head and worker processes of the `troupe` executable on
// loopback (LocalCluster), a driver in this process (Cluster). Workers load
// the probe actor library. Every wait has a deadline.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <set>

#include "core/cluster/cluster.h"
#include "core/cluster/collective_group.h"
#include "core/cluster/detail/http_status.h"
#include "core/cluster/local_cluster.h"
#include "tests/cluster/cluster_fixture.h"
#include "tests/cluster/probe_actors.h"
#include "transport/auth.h"

namespace troupe::cluster {
namespace {

using troupe::testing::Probe;
using troupe::testing::Reducer;
using troupe::testing::Relay;

constexpr absl::Duration kCallTimeout = absl::Seconds(20);

class ClusterTest : public testing::LocalClusterTest {
 public:
  ClusterTest() : LocalClusterTest(testing::probe_cluster({"CPU=2", "CPU=2,GPU=1", "CPU=2"})) {}

  int64_t pid_of(const ActorRef<Probe>& p) {
    auto pid = p.call(&Probe::pid).get(kCallTimeout);
    EXPECT_TRUE(pid.ok()) << pid.status();
    return pid.value_or(-1);
  }
  int worker_with_pid(int64_t pid) {
    for (int i = 0; i < local_->num_workers(); ++i) {
      if (local_->worker_pid(i) == pid) return i;
    }
    return -1;
  }
};

TEST_F(ClusterTest, HeadSeesThreeWorkersAndTheDriver) {
  auto s = driver_->status();
  ASSERT_TRUE(s.ok()) << s.status();
  int workers = 0, drivers = 0;
  for (const NodeStatus& n : s->nodes) {
    EXPECT_EQ(n.state, NodeState::kAlive);
    (n.info.kind == NodeKind::kWorker ? workers : drivers)++;
  }
  EXPECT_EQ(workers, 3);
  EXPECT_EQ(drivers, 1);
}

TEST_F(ClusterTest, CallsCrossProcessesPeerToPeer) {
  auto probe = driver_->spawn<Probe>({}, std::string("hello"));
  ASSERT_TRUE(probe.ok()) << probe.status();
  EXPECT_EQ(*probe->call(&Probe::tag).get(kCallTimeout), "hello");
  EXPECT_EQ(*probe->call(&Probe::add, int64_t{2}, int64_t{40}).get(kCallTimeout), 42);
  EXPECT_NE(worker_with_pid(pid_of(*probe)), -1);
}

TEST_F(ClusterTest, ActorsArePlacedByResources) {
  for (int i = 0; i < 2; ++i) {
    auto gpu = driver_->spawn<Probe>({.resources = "GPU=1"});
    if (i == 0) {
      ASSERT_TRUE(gpu.ok()) << gpu.status();
      EXPECT_EQ(worker_with_pid(pid_of(*gpu)), 1);  // the only GPU
    } else {
      // The one GPU is taken: no node has room.
      ASSERT_FALSE(gpu.ok());
      EXPECT_TRUE(absl::IsResourceExhausted(gpu.status())) << gpu.status();
    }
  }
  // Unconstrained actors with a CPU each spread over the nodes.
  std::set<int> used;
  for (int i = 0; i < 3; ++i) {
    auto p = driver_->spawn<Probe>({.resources = "CPU=2"});
    ASSERT_TRUE(p.ok()) << p.status();
    used.insert(worker_with_pid(pid_of(*p)));
  }
  EXPECT_EQ(used.size(), 3u);
}

std::set<int64_t> pids_of_group(ClusterTest& t, Cluster& c, PlacementGroupId pg, int bundles) {
  std::set<int64_t> pids;
  for (int b = 0; b < bundles; ++b) {
    auto p = c.spawn<Probe>({.resources = "CPU=1", .placement_group = pg.value, .bundle_index = b});
    EXPECT_TRUE(p.ok()) << p.status();
    if (p.ok()) pids.insert(t.pid_of(*p));
  }
  return pids;
}

TEST_F(ClusterTest, StrictSpreadLandsOnThreeNodes) {
  auto pg = driver_->create_placement_group({"CPU=1", "CPU=1", "CPU=1"},
                                            PlacementStrategy::kStrictSpread, "spread3");
  ASSERT_TRUE(pg.ok()) << pg.status();
  ASSERT_TRUE(driver_->wait_placement_group(*pg, absl::Seconds(10)).ok());
  EXPECT_EQ(pids_of_group(*this, *driver_, *pg, 3).size(), 3u);
  // Two bundles on one node fit an idle cluster, not this one now: pending.
  auto busy = driver_->create_placement_group({"CPU=1", "CPU=1"}, PlacementStrategy::kStrictPack);
  ASSERT_TRUE(busy.ok());
  EXPECT_TRUE(
      absl::IsDeadlineExceeded(driver_->wait_placement_group(*busy, absl::Milliseconds(300))));
  // A fourth bundle would need a fourth node: refused at once, saying so.
  auto four = driver_->create_placement_group({"CPU=1", "CPU=1", "CPU=1", "CPU=1"},
                                              PlacementStrategy::kStrictSpread, "four");
  ASSERT_TRUE(four.ok());
  absl::Status never = driver_->wait_placement_group(*four, absl::Seconds(30));
  EXPECT_TRUE(absl::IsResourceExhausted(never)) << never;
  EXPECT_NE(never.message().find("'four' can never be placed"), std::string::npos) << never;
  EXPECT_NE(never.message().find("the 3 worker nodes have {CPU=6"), std::string::npos) << never;
}

TEST_F(ClusterTest, StrictPackLandsOnOneNode) {
  auto pg = driver_->create_placement_group({"CPU=1", "CPU=1"}, PlacementStrategy::kStrictPack);
  ASSERT_TRUE(pg.ok());
  ASSERT_TRUE(driver_->wait_placement_group(*pg, absl::Seconds(10)).ok());
  EXPECT_EQ(pids_of_group(*this, *driver_, *pg, 2).size(), 1u);
}

TEST_F(ClusterTest, PackAndSpread) {
  auto pack = driver_->create_placement_group({"CPU=1", "CPU=1"}, PlacementStrategy::kPack);
  ASSERT_TRUE(pack.ok());
  ASSERT_TRUE(driver_->wait_placement_group(*pack, absl::Seconds(10)).ok());
  EXPECT_EQ(pids_of_group(*this, *driver_, *pack, 2).size(), 1u);
  auto spread = driver_->create_placement_group({"CPU=1", "CPU=1"}, PlacementStrategy::kSpread);
  ASSERT_TRUE(spread.ok());
  ASSERT_TRUE(driver_->wait_placement_group(*spread, absl::Seconds(10)).ok());
  EXPECT_EQ(pids_of_group(*this, *driver_, *spread, 2).size(), 2u);
  EXPECT_TRUE(driver_->remove_placement_group(*spread).ok());
}

TEST_F(ClusterTest, KilledWorkerIsDeclaredDeadAndItsCallersGetActorDied) {
  auto probe = driver_->spawn<Probe>({.node = static_cast<int>(local_->worker_node(0))});
  ASSERT_TRUE(probe.ok()) << probe.status();
  ASSERT_EQ(worker_with_pid(pid_of(*probe)), 0);
  auto in_flight = probe->call(&Probe::hold, 20000);
  absl::Time killed = absl::Now();
  local_->kill_worker(0, SIGKILL);
  auto r = std::move(in_flight).get(kCallTimeout);
  absl::Duration failed_after = absl::Now() - killed;
  EXPECT_TRUE(IsActorDied(r.status())) << r.status();
  EXPECT_NE(r.status().message().find(absl::StrCat("node ", local_->worker_node(0))),
            std::string::npos)
      << r.status();
  EXPECT_LT(failed_after, absl::Seconds(1)) << "the budget is 1 s";
  uint32_t dead = local_->worker_node(0);
  // The head heard of the loss before the caller did: asked at once, it
  // knows the actor is not alive (recovery relies on it; a caller that saw
  // it alive would go on to call the actor's replacement, which may wait
  // restart_wait for a node).
  absl::StatusOr<ClusterStatus> first_look = driver_->status();
  ASSERT_TRUE(first_look.ok()) << first_look.status();
  bool alive = false;
  for (const ActorStatus& a : first_look->actors)
    alive = alive || (a.id == probe->id().value && a.state == ActorState::kAlive);
  EXPECT_FALSE(alive) << "the head still thought the actor alive once its caller had seen it lost";
  EXPECT_TRUE(wait_status(
      [&](const ClusterStatus& s) {
        for (const NodeStatus& n : s.nodes) {
          if (n.info.index == dead) return n.state == NodeState::kDead;
        }
        return false;
      },
      absl::Seconds(2)))
      << "the head did not declare node " << dead << " dead within the budget";
  // Later calls fail at once with ActorDied too.
  auto later = probe->call(&Probe::tag).get(kCallTimeout);
  EXPECT_TRUE(IsActorDied(later.status())) << later.status();
}

// Sends worker `i` signal `sig` and waits until the head declares its node
// dead: the reason given, and how long that took (nullopt if it did not).
std::optional<std::pair<std::string, absl::Duration>> declared_dead_after(ClusterTest& t,
                                                                          LocalCluster& local,
                                                                          int i, int sig) {
  uint32_t node = local.worker_node(i);
  absl::Time sent = absl::Now();
  local.kill_worker(i, sig);
  std::string reason;
  bool dead = t.wait_status([&](const ClusterStatus& s) {
    for (const NodeStatus& n : s.nodes) {
      if (n.info.index == node && n.state == NodeState::kDead) {
        reason = n.death_reason;
        return true;
      }
    }
    return false;
  });
  if (!dead) return std::nullopt;
  return std::make_pair(reason, absl::Now() - sent);
}

TEST_F(ClusterTest, ASilentWorkerIsDeclaredDeadWithinTheHeartbeatBudget) {
  // Stopped, not killed: its connections stay open, only its missing
  // heartbeats tell.
  auto dead = declared_dead_after(*this, *local_, 2, SIGSTOP);
  local_->kill_worker(2, SIGKILL);
  ASSERT_TRUE(dead.has_value());
  // The budget (1 s) after its last heartbeat, plus slack for a detector
  // tick and a status poll on a busy machine.
  EXPECT_LT(dead->second, absl::Milliseconds(1500)) << dead->first;
  EXPECT_NE(dead->first.find("no heartbeat"), std::string::npos) << dead->first;
}

TEST_F(ClusterTest, AKilledWorkerIsDeclaredDeadAtOnceThroughTheHeadsConnection) {
  // The head holds a connection to every ready worker, hosting actors or not:
  // the process dying breaks it, well inside the heartbeat budget.
  auto dead = declared_dead_after(*this, *local_, 2, SIGKILL);
  ASSERT_TRUE(dead.has_value());
  EXPECT_LT(dead->second, absl::Milliseconds(900)) << dead->first;
  EXPECT_NE(dead->first.find("lost its connection"), std::string::npos) << dead->first;
}

TEST_F(ClusterTest, RestartableActorComesBackOnAnotherNode) {
  auto probe = driver_->spawn<Probe>({.max_restarts = 1}, std::string("survivor"));
  ASSERT_TRUE(probe.ok()) << probe.status();
  int before = worker_with_pid(pid_of(*probe));
  ASSERT_NE(before, -1);
  local_->kill_worker(before, SIGKILL);
  // Calls in flight fail; once the head has restarted it elsewhere, calls
  // reach the new incarnation, which ran on_restart and kept its arguments.
  absl::Time deadline = absl::Now() + absl::Seconds(15);
  absl::StatusOr<int64_t> pid = absl::UnknownError("not called");
  while (absl::Now() < deadline) {
    pid = probe->call(&Probe::pid).get(kCallTimeout);
    if (pid.ok()) break;
    absl::SleepFor(absl::Milliseconds(50));
  }
  ASSERT_TRUE(pid.ok()) << pid.status();
  int after = worker_with_pid(*pid);
  EXPECT_NE(after, -1);
  EXPECT_NE(after, before);
  EXPECT_EQ(*probe->call(&Probe::restarts).get(kCallTimeout), 1);
  EXPECT_EQ(*probe->call(&Probe::tag).get(kCallTimeout), "survivor");
}

TEST_F(ClusterTest, AnActorWhoseNodeDiesWhileHostingItIsPlacedOnAnother) {
  // Nothing of it ran, so the spawn succeeds elsewhere: no restart is spent.
  std::string armed = ::testing::TempDir() + "/tripwire-armed-" + std::to_string(::getpid());
  int fd = ::open(armed.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0600);
  ASSERT_GE(fd, 0);
  ::close(fd);
  auto tripwire = driver_->spawn<troupe::testing::Tripwire>({}, armed);
  ASSERT_TRUE(tripwire.ok()) << tripwire.status();
  EXPECT_NE(::access(armed.c_str(), F_OK), 0)
      << "no node hosted it first (the file is still there)";
  auto pid = tripwire->call(&troupe::testing::Tripwire::pid).get(kCallTimeout);
  ASSERT_TRUE(pid.ok()) << pid.status();
  EXPECT_NE(worker_with_pid(*pid), -1);
  ::unlink(armed.c_str());
}

TEST_F(ClusterTest, AnIdempotentCallLostWithItsNodeIsSentAgainToTheRestartedActor) {
  auto probe = driver_->spawn<Probe>(
      {.max_restarts = 1, .max_task_retries = 1, .resources = "CPU=1"}, std::string("retried"));
  ASSERT_TRUE(probe.ok()) << probe.status();
  int victim = worker_with_pid(pid_of(*probe));
  ASSERT_NE(victim, -1);
  Future<bool> retried = probe->call(&Probe::hold, 1500);    // TROUPE_IDEMPOTENT
  Future<bool> once = probe->call(&Probe::hold_once, 1500);  // not: at most once
  // Both are in flight once call() returned: sent, not answered.
  local_->kill_worker(victim);
  auto r = retried.get(kCallTimeout);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(*r);
  auto lost = once.get(kCallTimeout);
  EXPECT_TRUE(IsActorDied(lost.status())) << lost.status();
  EXPECT_EQ(*probe->call(&Probe::restarts).get(kCallTimeout), 1);
  EXPECT_NE(worker_with_pid(pid_of(*probe)), victim);
}

TEST_F(ClusterTest, AWorkerThatJoinsLaterTakesNewActors) {
  auto i = local_->add_worker("CPU=1,late=1");
  ASSERT_TRUE(i.ok()) << i.status();
  auto probe = driver_->spawn<Probe>({.resources = "late=1"});
  ASSERT_TRUE(probe.ok()) << probe.status();
  EXPECT_EQ(worker_with_pid(pid_of(*probe)), *i);
}

TEST_F(ClusterTest, NamedActorsAreFoundClusterWide) {
  auto probe = driver_->spawn<Probe>({.name = "the-probe"}, std::string("named"));
  ASSERT_TRUE(probe.ok()) << probe.status();
  auto again = driver_->spawn<Probe>({.name = "the-probe"});
  EXPECT_TRUE(absl::IsAlreadyExists(again.status())) << again.status();
  auto other = Cluster::connect(local_->client_options());
  ASSERT_TRUE(other.ok()) << other.status();
  auto found = (*other)->get_actor<Probe>("the-probe");
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(*found->call(&Probe::tag).get(kCallTimeout), "named");
  EXPECT_TRUE(absl::IsNotFound((*other)->get_actor<Probe>("nobody").status()));
}

TEST_F(ClusterTest, HandlesAreArgumentsAndResultsCallableWhereTheyLand) {
  // The probe takes the GPU worker's GPU and one of its CPUs: the relay,
  // which needs two CPUs, lands on another worker.
  auto probe = driver_->spawn<Probe>({.name = "partner", .resources = "CPU=1,GPU=1"},
                                     std::string("partner"));
  ASSERT_TRUE(probe.ok()) << probe.status();
  auto relay = driver_->spawn<Relay>({.resources = "CPU=2"}, *probe);
  ASSERT_TRUE(relay.ok()) << relay.status();
  int64_t probe_pid = pid_of(*probe);
  int64_t relay_pid = *relay->call(&Relay::pid).get(kCallTimeout);
  ASSERT_NE(probe_pid, relay_pid);

  // Through its constructor, a method, and by name from inside the actor.
  EXPECT_EQ(*relay->call(&Relay::partner_tag).get(kCallTimeout), "partner");
  EXPECT_EQ(*relay->call(&Relay::pid_of, *probe).get(kCallTimeout), probe_pid);
  EXPECT_EQ(*relay->call(&Relay::tag_of_named, std::string("partner")).get(kCallTimeout),
            "partner");
  auto unknown = relay->call(&Relay::tag_of_named, std::string("nobody")).get(kCallTimeout);
  EXPECT_TRUE(absl::IsNotFound(unknown.status())) << unknown.status();

  // As a result, back in the driver.
  auto partner = relay->call(&Relay::partner).get(kCallTimeout);
  ASSERT_TRUE(partner.ok()) << partner.status();
  EXPECT_EQ(partner->id(), probe->id());
  EXPECT_EQ(*partner->call(&Probe::tag).get(kCallTimeout), "partner");

  // An actor of the driver's own process, called back from the worker.
  auto local = driver_->node().system().spawn<Probe>({}, std::string("driver-side"));
  ASSERT_TRUE(local.ok()) << local.status();
  EXPECT_EQ(*relay->call(&Relay::pid_of, *local).get(kCallTimeout), ::getpid());

  // An invalid handle stays invalid.
  auto empty = driver_->spawn<Relay>({}, ActorRef<Probe>());
  ASSERT_TRUE(empty.ok()) << empty.status();
  auto none = empty->call(&Relay::partner_tag).get(kCallTimeout);
  EXPECT_TRUE(absl::IsFailedPrecondition(none.status())) << none.status();
}

// A job_driver process (tests/cluster/job_driver.cc). In `wait` mode it is
// left running once it printed "ready job N" (its pid and job are
// returned); in `exit` mode it runs to its end (its exit status is
// returned). pid -1 and job 0 with what it printed if it never got ready.
struct JobDriver {
  pid_t pid = -1;
  uint32_t job = 0;
  int exit_status = -1;
  std::string output;
};

JobDriver run_job_driver(const LocalCluster& local, const std::string& mode, bool detached) {
  bool wait = mode == "wait";
  std::string command =
      absl::StrCat(JOB_DRIVER, " ", mode, detached ? " detached" : "", " --head ",
                   local.head_address(), " --token-file ", local.token_file(), " 2>&1");
  // Left running: the shell puts it in the background and says its pid first.
  if (wait) command = absl::StrCat("(exec ", command, " & echo $!)");
  JobDriver d;
  FILE* out = ::popen(command.c_str(), "r");
  if (out == nullptr) return d;
  char line[512];
  pid_t pid = wait ? -1 : 0;
  // It prints "ready" or gives up on the cluster within its connect timeout.
  while (std::fgets(line, sizeof line, out) != nullptr) {
    if (pid < 0) {
      pid = static_cast<pid_t>(std::atol(line));
      continue;
    }
    d.output += line;
    unsigned job = 0;
    if (std::sscanf(line, "ready job %u", &job) == 1) {
      d.pid = pid;
      d.job = job;
      if (wait) break;  // its later output is not read
    }
  }
  int status = ::pclose(out);
  if (!wait) d.exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return d;
}

bool has_actor(const ClusterStatus& s, const std::string& name, ActorState state) {
  for (const ActorStatus& a : s.actors) {
    if (a.name == name && a.state == state) return true;
  }
  return false;
}

bool has_group(const ClusterStatus& s, const std::string& name) {
  for (const PlacementGroupStatus& g : s.placement_groups) {
    if (g.name == name) return true;
  }
  return false;
}

const JobStatus* job_in(const ClusterStatus& s, uint32_t job) {
  for (const JobStatus& j : s.jobs) {
    if (j.id == job) return &j;
  }
  return nullptr;
}

TEST_F(ClusterTest, AKilledDriversJobLeavesNothingButWhatIsDetached) {
  JobDriver first = run_job_driver(*local_, "wait", /*detached=*/true);
  ASSERT_GT(first.pid, 0) << first.output;
  auto s = driver_->status();
  ASSERT_TRUE(s.ok()) << s.status();
  const JobStatus* job = job_in(*s, first.job);
  ASSERT_NE(job, nullptr);
  EXPECT_EQ(job->state, JobState::kRunning);
  EXPECT_EQ(job->actors, 1);  // job-probe; job-detached is nobody's
  EXPECT_EQ(job->placement_groups.size(), 1u);
  EXPECT_EQ(job->collective_groups, std::vector<std::string>{"job-group"});
  EXPECT_TRUE(driver_->kv_get("collective/job-group/generation")->has_value());

  // Another running job cannot take its collective group's name.
  auto taken = declare_collective_group(*driver_, "job-group", {ActorId{1}});
  EXPECT_TRUE(absl::IsAlreadyExists(taken.status())) << taken.status();

  ASSERT_EQ(::kill(first.pid, SIGKILL), 0);
  // Within the failure-detection budget (1 s here), and the time to kill.
  EXPECT_TRUE(wait_status([&](const ClusterStatus& st) {
    const JobStatus* j = job_in(st, first.job);
    return j != nullptr && j->state == JobState::kFailed &&
           !has_actor(st, "job-probe", ActorState::kAlive) && !has_group(st, "job-pg");
  })) << render_status(*driver_->status());
  s = driver_->status();
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(has_actor(*s, "job-detached", ActorState::kAlive)) << render_status(*s);
  EXPECT_TRUE(has_group(*s, "job-detached-pg")) << render_status(*s);
  EXPECT_TRUE(absl::IsNotFound(driver_->get_actor<Probe>("job-probe").status()));
  EXPECT_FALSE(driver_->kv_get("collective/job-group/generation")->has_value());

  // Run again: every name is free, and a job that ends in order finishes.
  JobDriver second = run_job_driver(*local_, "exit", /*detached=*/false);
  ASSERT_EQ(second.exit_status, 0) << second.output;
  ASSERT_NE(second.job, 0u) << second.output;
  EXPECT_TRUE(wait_status([&](const ClusterStatus& st) {
    const JobStatus* j = job_in(st, second.job);
    return j != nullptr && j->state == JobState::kFinished &&
           !has_actor(st, "job-probe", ActorState::kAlive) && !has_group(st, "job-pg");
  })) << render_status(*driver_->status());

  // What is detached goes by hand.
  auto [killed, kill_out] = local_->run_cli({"kill", "job-detached"});
  EXPECT_EQ(killed, 0) << kill_out;
  EXPECT_NE(kill_out.find("killed actor-"), std::string::npos) << kill_out;
  auto [removed, remove_out] = local_->run_cli({"pg", "remove", "job-detached-pg"});
  EXPECT_EQ(removed, 0) << remove_out;
  EXPECT_TRUE(wait_status([&](const ClusterStatus& st) {
    return !has_actor(st, "job-detached", ActorState::kAlive) && !has_group(st, "job-detached-pg");
  }));
  auto [unknown, unknown_out] = local_->run_cli({"kill", "nobody"});
  EXPECT_EQ(unknown, 1) << unknown_out;
  EXPECT_NE(unknown_out.find("no actor named"), std::string::npos) << unknown_out;
  auto [status_rc, status_out] = local_->run_cli({"status"});
  EXPECT_EQ(status_rc, 0);
  EXPECT_NE(status_out.find("FAILED"), std::string::npos) << status_out;
  EXPECT_NE(status_out.find("FINISHED"), std::string::npos) << status_out;
}

TEST_F(ClusterTest, KvStoreForRendezvous) {
  EXPECT_TRUE(*driver_->kv_put("nccl/unique-id", "abc", false));
  EXPECT_FALSE(*driver_->kv_put("nccl/unique-id", "xyz", false));
  EXPECT_EQ(**driver_->kv_get("nccl/unique-id"), "abc");
  EXPECT_FALSE(driver_->kv_get("missing")->has_value());
}

TEST_F(ClusterTest, AWrongTokenIsRefused) {
  std::string bad = local_->state_dir() + "/bad-token";
  ASSERT_TRUE(transport::write_token_file(bad, "not-the-cluster-token").ok());
  auto stranger = Cluster::connect(
      {.head = local_->head_address(), .token_file = bad, .timeout = absl::Seconds(5)});
  ASSERT_FALSE(stranger.ok());
  EXPECT_TRUE(absl::IsPermissionDenied(stranger.status())) << stranger.status();
  // Said as a user reads it, without the runtime's node and actor ids.
  EXPECT_EQ(stranger.status().message().find("actor-0-1"), absl::string_view::npos)
      << stranger.status();
  auto [code, out] = local_->run_cli({"status", "--token-file", bad});
  EXPECT_NE(code, 0);
  EXPECT_NE(out.find("token"), std::string::npos) << out;
}

TEST_F(ClusterTest, StatusShowsNodesActorsAndGroups) {
  auto probe = driver_->spawn<Probe>({.name = "shown", .resources = "CPU=1"});
  ASSERT_TRUE(probe.ok());
  auto pg = driver_->create_placement_group({"CPU=1"}, PlacementStrategy::kPack, "grp");
  ASSERT_TRUE(pg.ok());
  local_->kill_worker(2, SIGKILL);
  uint32_t dead = local_->worker_node(2);
  ASSERT_TRUE(wait_status([&](const ClusterStatus& s) {
    for (const NodeStatus& n : s.nodes) {
      if (n.info.index == dead) return n.state == NodeState::kDead;
    }
    return false;
  }));
  auto [code, out] = local_->run_cli({"status"});
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("ALIVE"), std::string::npos) << out;
  EXPECT_NE(out.find("DEAD"), std::string::npos) << out;
  EXPECT_NE(out.find("Probe"), std::string::npos) << out;
  EXPECT_NE(out.find("shown"), std::string::npos) << out;
  EXPECT_NE(out.find("grp"), std::string::npos) << out;
  EXPECT_NE(out.find("CPU"), std::string::npos) << out;
  EXPECT_NE(out.find("driver"), std::string::npos) << out;
}

TEST_F(ClusterTest, ADrainedNodeTakesNoNewActorsAndEveryNodeHearsOfIt) {
  const uint64_t version = driver_->membership_version();
  const uint32_t drained = local_->worker_node(0);
  auto kept = driver_->spawn<Probe>({.resources = "CPU=1", .node = static_cast<int>(drained)});
  ASSERT_TRUE(kept.ok()) << kept.status();
  ASSERT_TRUE(driver_->drain_node(drained, true, "maintenance").ok());
  // The driver hears of it with a heartbeat.
  const absl::Time until = absl::Now() + kCallTimeout;
  while (driver_->membership_version() == version && absl::Now() < until)
    absl::SleepFor(absl::Milliseconds(20));
  EXPECT_GT(driver_->membership_version(), version);
  // New actors go elsewhere; the one there stays.
  for (int i = 0; i < 3; ++i) {
    auto p = driver_->spawn<Probe>({.resources = "CPU=1"});
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_NE(worker_with_pid(pid_of(*p)), 0) << "placed on the draining node";
  }
  EXPECT_EQ(worker_with_pid(pid_of(*kept)), 0);
  auto [code, out] = local_->run_cli({"status"});
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("DRAIN"), std::string::npos) << out;
  EXPECT_NE(out.find("draining: maintenance"), std::string::npos) << out;
  // `troupe drain` names what keeps the node busy when it times out.
  auto [busy, busy_out] = local_->run_cli({"drain", std::to_string(drained), "--timeout", "0.5"});
  EXPECT_EQ(busy, 1) << busy_out;
  EXPECT_NE(busy_out.find("still hosts 1 actor of job"), std::string::npos) << busy_out;
  ASSERT_TRUE(driver_->kill(kept->id()).ok());
  auto [done, done_out] = local_->run_cli({"drain", std::to_string(drained), "--timeout", "20"});
  EXPECT_EQ(done, 0) << done_out;
  EXPECT_NE(done_out.find("is drained"), std::string::npos) << done_out;
  // Errors: no such node, the head; and back to work.
  auto [unknown, unknown_out] = local_->run_cli({"drain", "99"});
  EXPECT_EQ(unknown, 1) << unknown_out;
  EXPECT_NE(unknown_out.find("no node 99"), std::string::npos) << unknown_out;
  auto [head, head_out] = local_->run_cli({"drain", "0"});
  EXPECT_EQ(head, 1) << head_out;
  EXPECT_NE(head_out.find("not a worker"), std::string::npos) << head_out;
  auto [cancel, cancel_out] = local_->run_cli({"drain", std::to_string(drained), "--cancel"});
  EXPECT_EQ(cancel, 0) << cancel_out;
  auto s = driver_->status();
  ASSERT_TRUE(s.ok()) << s.status();
  for (const NodeStatus& n : s->nodes) {
    EXPECT_FALSE(n.draining) << n.info.index;
  }
}

TEST_F(ClusterTest, CollectiveGroupOfActorsAllreducesAndSurvivesALostMember) {
  // One reducer per worker, declared as group "dp" in that order.
  std::vector<ActorRef<Reducer>> reducers;
  std::vector<ActorId> ids;
  for (int i = 0; i < 3; ++i) {
    auto r = driver_->spawn<Reducer>({.node = static_cast<int>(local_->worker_node(i))});
    ASSERT_TRUE(r.ok()) << r.status();
    ids.push_back(r->id());
    reducers.push_back(*r);
  }
  auto generation = declare_collective_group(*driver_, "dp", ids);
  ASSERT_TRUE(generation.ok()) << generation.status();
  EXPECT_EQ(*generation, 0u);
  auto join_all = [&](const std::vector<ActorRef<Reducer>>& members) {
    std::vector<Future<int>> joins;
    for (auto& r : members)
      joins.push_back(r.call(&Reducer::join, std::string("dp")));
    for (size_t i = 0; i < joins.size(); ++i) {
      auto rank = joins[i].get(kCallTimeout);
      ASSERT_TRUE(rank.ok()) << rank.status();
      EXPECT_EQ(*rank, static_cast<int>(i));
    }
  };
  auto allreduce_all = [&](const std::vector<ActorRef<Reducer>>& members, double expected) {
    std::vector<Future<double>> sums;
    for (auto& r : members)
      sums.push_back(r.call(&Reducer::allreduce, int64_t{100000}, 3));
    for (auto& f : sums) {
      auto sum = f.get(kCallTimeout);
      ASSERT_TRUE(sum.ok()) << sum.status();
      EXPECT_EQ(*sum, expected);
    }
  };
  join_all(reducers);
  allreduce_all(reducers, 1 + 2 + 3);

  // Worker 2 dies while all three are in the middle of long allreduces: the
  // others' operations fail with Aborted, at once.
  std::vector<Future<double>> running;
  for (auto& r : reducers)
    running.push_back(r.call(&Reducer::allreduce, int64_t{1} << 20, 100000));
  absl::Time killed = absl::Now();
  local_->kill_worker(2, SIGKILL);
  for (int i = 0; i < 2; ++i) {
    auto result = running[i].get(kCallTimeout);
    EXPECT_TRUE(absl::IsAborted(result.status())) << "rank " << i << ": " << result.status();
  }
  EXPECT_LT(absl::Now() - killed, absl::Seconds(5));

  // The survivors and a replacement form generation 1, which works.
  auto replacement = driver_->spawn<Reducer>({.node = static_cast<int>(local_->worker_node(0))});
  ASSERT_TRUE(replacement.ok()) << replacement.status();
  std::vector<ActorRef<Reducer>> next = {reducers[0], reducers[1], *replacement};
  generation = declare_collective_group(*driver_, "dp", {next[0].id(), next[1].id(), next[2].id()});
  ASSERT_TRUE(generation.ok()) << generation.status();
  EXPECT_EQ(*generation, 1u);
  join_all(next);
  allreduce_all(next, 1 + 2 + 3);
}

TEST_F(ClusterTest, CollectiveGroupErrorsAreClear) {
  auto r = driver_->spawn<Reducer>({});
  ASSERT_TRUE(r.ok()) << r.status();
  auto missing = r->call(&Reducer::join, std::string("nobody-declared-this")).get(kCallTimeout);
  EXPECT_TRUE(absl::IsNotFound(missing.status())) << missing.status();
  auto other = driver_->spawn<Reducer>({});
  ASSERT_TRUE(other.ok());
  ASSERT_TRUE(declare_collective_group(*driver_, "others", {other->id()}).ok());
  auto outsider = r->call(&Reducer::join, std::string("others")).get(kCallTimeout);
  EXPECT_TRUE(absl::IsNotFound(outsider.status())) << outsider.status();
  EXPECT_NE(outsider.status().message().find("not a member"), std::string::npos);
  EXPECT_TRUE(absl::IsInvalidArgument(
      declare_collective_group(*driver_, "twice", {other->id(), other->id()}).status()));
  // Outside an actor, join() cannot know the rank.
  EXPECT_TRUE(absl::IsFailedPrecondition(CollectiveGroup::join("others").status()));
}

}  // namespace
}  // namespace troupe::cluster
