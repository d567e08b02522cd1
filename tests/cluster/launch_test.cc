// `troupe worker` ranks started as a cluster manager starts them - fabricated
// Slurm and torchrun environments on loopback - find the same head (rank 0
// starts it), join it, and exit with the codes the managers act on; a driver
// in the same environment finds the cluster with Cluster::connect().
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/cluster/cluster.h"
#include "core/cluster/commands.h"
#include "core/cluster/local_cluster.h"

extern char** environ;

namespace troupe::cluster {
namespace {

const std::string kToken(64, 'c');

// What a launch sets (and what this test process may have set itself).
bool is_launch_variable(const std::string& name) {
  for (const char* prefix : {"SLURM_", "PET_", "JOBSET_", "TROUPE_HEAD", "TROUPE_TOKEN"}) {
    if (name.starts_with(prefix)) return true;
  }
  for (const char* exact : {"MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "GROUP_RANK",
                            "REPLICATED_JOB_NAME", "JOB_INDEX", "JOB_COMPLETION_INDEX"}) {
    if (name == exact) return true;
  }
  return false;
}

// A `troupe` process with this environment (less any launch of ours) plus `vars`.
struct Proc {
  pid_t pid = -1;
  std::string log;
  int exit_code = -1;

  // The process's exit code, or -1 if it is still running after `timeout` (it is then killed).
  int wait(absl::Duration timeout) {
    absl::Time deadline = absl::Now() + timeout;
    while (pid > 0) {
      int status = 0;
      if (::waitpid(pid, &status, WNOHANG) == pid) {
        pid = -1;
        exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        break;
      }
      if (absl::Now() >= deadline) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, nullptr, 0);
        pid = -1;
        break;
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    return exit_code;
  }
  std::string output() const {
    std::ifstream in(log);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  ~Proc() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }
};

std::unique_ptr<Proc> start(const std::vector<std::string>& args,
                            const std::map<std::string, std::string>& vars,
                            const std::string& log) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string entry = *e;
    if (!is_launch_variable(entry.substr(0, entry.find('=')))) env.push_back(entry);
  }
  for (const auto& [k, v] : vars)
    env.push_back(k + "=" + v);
  auto p = std::make_unique<Proc>();
  p->log = log;
  p->pid = ::fork();
  if (p->pid == 0) {
    int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    std::vector<char*> argv = {const_cast<char*>(TROUPE_BINARY)};
    for (const std::string& a : args)
      argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    std::vector<char*> envp;
    for (std::string& e : env)
      envp.push_back(e.data());
    envp.push_back(nullptr);
    ::execve(TROUPE_BINARY, argv.data(), envp.data());
    ::_exit(127);
  }
  return p;
}

class LaunchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           absl::StrCat("troupe-launch-test-", ::getpid(), "-",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
    port_ = free_loopback_port();
  }
  void TearDown() override {
    std::filesystem::remove_all(dir_);
    // The head rank 0 started keeps its state in a directory of its own.
    for (const char* manager : {"slurm", "torchrun"})
      std::filesystem::remove_all(absl::StrCat("/tmp/troupe-", manager, "-", port_));
    for (const auto& [k, v] : set_here_)
      ::unsetenv(k.c_str());
  }
  std::string log(const std::string& name) const { return (dir_ / (name + ".log")).string(); }
  // Sets `vars` in this process too, as a driver inside the launch sees them.
  void enter(const std::map<std::string, std::string>& vars) {
    for (const auto& [k, v] : vars) {
      ::setenv(k.c_str(), v.c_str(), 1);
      set_here_[k] = v;
    }
  }
  // Waits until the cluster has `n` live workers; their names.
  std::vector<std::string> wait_workers(Cluster& cluster, size_t n) {
    std::vector<std::string> names;
    for (absl::Time deadline = absl::Now() + absl::Seconds(60); absl::Now() < deadline;) {
      names.clear();
      absl::StatusOr<ClusterStatus> s = cluster.status();
      if (s.ok()) {
        for (const NodeStatus& node : s->nodes) {
          if (node.state == NodeState::kAlive && node.info.kind == NodeKind::kWorker && node.ready)
            names.push_back(node.info.name);
        }
      }
      if (names.size() >= n) break;
      absl::SleepFor(absl::Milliseconds(100));
    }
    return names;
  }

  std::filesystem::path dir_;
  uint16_t port_ = 0;
  std::map<std::string, std::string> set_here_;
};

const std::vector<std::string> kWorker = {"worker", "--resources", "CPU=1", "--transports", "tcp"};

TEST_F(LaunchTest, SlurmRanksFindTheHeadRankZeroStartsAndStopInOrder) {
  std::map<std::string, std::string> env = {{"SLURM_JOB_ID", "77"},
                                            {"SLURM_STEP_NODELIST", "127.0.0.1"},
                                            {"SLURM_NTASKS", "3"},
                                            {"TROUPE_HEAD_PORT", absl::StrCat(port_)},
                                            {"TROUPE_TOKEN", kToken}};
  // The other ranks first: they wait for the head.
  std::vector<std::unique_ptr<Proc>> ranks(3);
  for (int r : {2, 1, 0}) {
    std::map<std::string, std::string> vars = env;
    vars["SLURM_PROCID"] = absl::StrCat(r);
    ranks[r] = start(kWorker, vars, log(absl::StrCat("rank", r)));
    if (r == 1) absl::SleepFor(absl::Milliseconds(700));
  }
  // A driver in the batch script: the job's node list, no step.
  enter({{"SLURM_JOB_ID", "77"},
         {"SLURM_JOB_NODELIST", "127.0.0.1"},
         {"TROUPE_HEAD_PORT", absl::StrCat(port_)},
         {"TROUPE_TOKEN", kToken}});
  absl::StatusOr<std::unique_ptr<Cluster>> cluster = Cluster::connect();
  ASSERT_TRUE(cluster.ok()) << cluster.status() << "\n" << ranks[0]->output();
  EXPECT_EQ(wait_workers(**cluster, 3).size(), 3u) << ranks[0]->output();
  EXPECT_NE(ranks[0]->output().find("slurm rank 0 of 3"), std::string::npos);
  EXPECT_NE(ranks[0]->output().find("starting the head"), std::string::npos);
  EXPECT_NE(ranks[2]->output().find("waiting for the head"), std::string::npos)
      << ranks[2]->output();
  cluster->reset();
  // `troupe stop` inside the job finds the head the same way; every rank exits 0.
  auto stop = start({"stop"}, set_here_, log("stop"));
  EXPECT_EQ(stop->wait(absl::Seconds(30)), 0) << stop->output();
  for (int r = 0; r < 3; ++r)
    EXPECT_EQ(ranks[r]->wait(absl::Seconds(30)), kExitOk) << ranks[r]->output();
}

TEST_F(LaunchTest, TorchrunRanksJoinAndOneThatLosesItsHeadExitsWithHeadLost) {
  std::map<std::string, std::string> env = {{"MASTER_ADDR", "127.0.0.1"},
                                            {"MASTER_PORT", absl::StrCat(port_)},
                                            {"WORLD_SIZE", "2"},
                                            {"TROUPE_TOKEN", kToken}};
  std::vector<std::unique_ptr<Proc>> ranks(2);
  for (int r : {0, 1}) {
    std::map<std::string, std::string> vars = env;
    vars["RANK"] = absl::StrCat(r);
    std::vector<std::string> args = kWorker;
    args.insert(args.end(), {"--head-timeout", "2s"});
    ranks[r] = start(args, vars, log(absl::StrCat("rank", r)));
  }
  enter(env);
  absl::StatusOr<std::unique_ptr<Cluster>> cluster = Cluster::connect();
  ASSERT_TRUE(cluster.ok()) << cluster.status() << "\n" << ranks[0]->output();
  EXPECT_EQ(wait_workers(**cluster, 2).size(), 2u) << ranks[1]->output();
  cluster->reset();
  // Rank 0's machine fails: the head it started goes with it.
  ::kill(ranks[0]->pid, SIGKILL);
  EXPECT_EQ(ranks[1]->wait(absl::Seconds(30)), kExitHeadLost) << ranks[1]->output();
}

TEST_F(LaunchTest, ALaunchWithoutATokenIsAUsageErrorThatSaysWhatToSet) {
  auto rank = start(
      kWorker, {{"SLURM_JOB_ID", "9"}, {"SLURM_STEP_NODELIST", "127.0.0.1"}, {"SLURM_PROCID", "1"}},
      log("rank1"));
  EXPECT_EQ(rank->wait(absl::Seconds(30)), kExitUsage);
  EXPECT_NE(rank->output().find("TROUPE_TOKEN"), std::string::npos) << rank->output();
}

}  // namespace
}  // namespace troupe::cluster
