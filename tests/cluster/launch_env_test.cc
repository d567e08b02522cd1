// Reading a cluster manager's launch environment (core/cluster/launch_env.h),
// from fabricated environments.
#include "core/cluster/launch_env.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace troupe::cluster {
namespace {

EnvLookup env_of(std::map<std::string, std::string> vars) {
  auto shared = std::make_shared<std::map<std::string, std::string>>(std::move(vars));
  return [shared](const char* name) -> const char* {
    auto it = shared->find(name);
    return it == shared->end() ? nullptr : it->second.c_str();
  };
}

LaunchEnv detect(std::map<std::string, std::string> vars) {
  absl::StatusOr<std::optional<LaunchEnv>> e = detect_launch_env(env_of(std::move(vars)));
  EXPECT_TRUE(e.ok()) << e.status();
  EXPECT_TRUE(e.ok() && e->has_value());
  return e.ok() && e->has_value() ? **e : LaunchEnv{};
}

TEST(SlurmHostlistTest, ExpandsRangesKeepingTheirPadding) {
  auto hosts = expand_slurm_hostlist("gpu[01-03,7],login1");
  ASSERT_TRUE(hosts.ok()) << hosts.status();
  EXPECT_EQ(*hosts, (std::vector<std::string>{"gpu01", "gpu02", "gpu03", "gpu7", "login1"}));
}

TEST(SlurmHostlistTest, ExpandsSeveralBracketsInOneName) {
  auto hosts = expand_slurm_hostlist("rack[1-2]-n[08-09]");
  ASSERT_TRUE(hosts.ok()) << hosts.status();
  EXPECT_EQ(*hosts, (std::vector<std::string>{"rack1-n08", "rack1-n09", "rack2-n08", "rack2-n09"}));
}

TEST(SlurmHostlistTest, RefusesWhatDoesNotParse) {
  for (const char* bad : {"", "n[3-1]", "n[a]", "n[1-2", "n]1[", "n[]"}) {
    EXPECT_FALSE(expand_slurm_hostlist(bad).ok()) << bad;
  }
}

TEST(LaunchEnvTest, NoneOutsideAClusterManager) {
  absl::StatusOr<std::optional<LaunchEnv>> e = detect_launch_env(env_of({{"HOME", "/root"}}));
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_FALSE(e->has_value());
}

TEST(LaunchEnvTest, SlurmHeadIsTheFirstNodeOnAPortFromTheJob) {
  std::map<std::string, std::string> vars = {{"SLURM_JOB_ID", "4242"},
                                             {"SLURM_STEP_NODELIST", "gpu[07-09]"},
                                             {"SLURM_PROCID", "2"},
                                             {"SLURM_NTASKS", "3"}};
  LaunchEnv e = detect(vars);
  EXPECT_EQ(e.manager, "slurm");
  EXPECT_EQ(e.head_address(), "gpu07:19242");
  EXPECT_EQ(e.rank, 2);
  EXPECT_EQ(e.world_size, 3);
  EXPECT_FALSE(e.runs_head());
  vars["SLURM_PROCID"] = "0";
  vars["TROUPE_HEAD_PORT"] = "7001";
  e = detect(vars);
  EXPECT_TRUE(e.runs_head());
  EXPECT_EQ(e.head_address(), "gpu07:7001");
}

TEST(LaunchEnvTest, SlurmBatchScriptUsesTheJobsNodeList) {
  // What a driver in the sbatch script sees: no step yet.
  LaunchEnv e = detect({{"SLURM_JOB_ID", "17"}, {"SLURM_JOB_NODELIST", "node[3-4]"}});
  EXPECT_EQ(e.head_address(), "node3:15017");
  // Inside an allocation, but nowhere to look: no launch.
  auto none = detect_launch_env(env_of({{"SLURM_JOB_ID", "17"}}));
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
}

TEST(LaunchEnvTest, MalformedVariablesAreNamed) {
  auto e = detect_launch_env(
      env_of({{"SLURM_JOB_ID", "5"}, {"SLURM_STEP_NODELIST", "n1"}, {"SLURM_PROCID", "first"}}));
  ASSERT_FALSE(e.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(e.status()));
  EXPECT_NE(e.status().message().find("SLURM_PROCID=first"), std::string::npos) << e.status();
  e = detect_launch_env(env_of({{"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}}));
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("MASTER_PORT=70000"), std::string::npos) << e.status();
  e = detect_launch_env(env_of({{"SLURM_JOB_ID", "5"}, {"SLURM_STEP_NODELIST", "n[2-1]"}}));
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("SLURM_STEP_NODELIST"), std::string::npos) << e.status();
}

TEST(LaunchEnvTest, TorchrunHeadIsTheMasterAndItsNodeRankDecides) {
  LaunchEnv e = detect({{"MASTER_ADDR", "10.0.0.1"},
                        {"MASTER_PORT", "29400"},
                        {"RANK", "5"},
                        {"GROUP_RANK", "1"},
                        {"WORLD_SIZE", "8"}});
  EXPECT_EQ(e.manager, "torchrun");
  EXPECT_EQ(e.head_address(), "10.0.0.1:29400");
  EXPECT_EQ(e.rank, 1);  // the node's rank: one troupe worker per node
  EXPECT_EQ(e.world_size, 8);
  e = detect({{"MASTER_ADDR", "10.0.0.1"}, {"RANK", "0"}});
  EXPECT_EQ(e.head_address(), "10.0.0.1:29500");  // torchrun's default port
  EXPECT_TRUE(e.runs_head());
}

TEST(LaunchEnvTest, KubeflowPyTorchJobUsesItsPetVariables) {
  LaunchEnv e = detect({{"MASTER_ADDR", "job-master-0"},
                        {"MASTER_PORT", "23456"},
                        {"PET_MASTER_ADDR", "job-master-0"},
                        {"PET_MASTER_PORT", "23456"},
                        {"PET_NODE_RANK", "2"},
                        {"PET_NNODES", "4"},
                        {"RANK", "9"}});
  EXPECT_EQ(e.manager, "kubeflow");
  EXPECT_EQ(e.head_address(), "job-master-0:23456");
  EXPECT_EQ(e.rank, 2);
  EXPECT_EQ(e.world_size, 4);
}

TEST(LaunchEnvTest, JobSetHeadIsPodZeroOfJobZeroByItsStableName) {
  std::map<std::string, std::string> vars = {{"JOBSET_NAME", "llama"},
                                             {"REPLICATED_JOB_NAME", "workers"},
                                             {"JOB_INDEX", "0"},
                                             {"JOB_COMPLETION_INDEX", "3"}};
  LaunchEnv e = detect(vars);
  EXPECT_EQ(e.manager, "jobset");
  EXPECT_EQ(e.head_address(), "llama-workers-0-0.llama:6380");
  EXPECT_EQ(e.rank, 3);
  vars["JOB_COMPLETION_INDEX"] = "0";
  EXPECT_TRUE(detect(vars).runs_head());
  vars["JOB_INDEX"] = "1";  // pod 0 of another job: not the head
  EXPECT_FALSE(detect(vars).runs_head());
  vars["TROUPE_JOBSET_SUBDOMAIN"] = "net";
  EXPECT_EQ(detect(vars).head_host, "llama-workers-0-0.net");
}

TEST(LaunchEnvTest, SlurmWinsOverTorchrunVariablesInside) {
  LaunchEnv e = detect({{"SLURM_JOB_ID", "8"},
                        {"SLURM_STEP_NODELIST", "a1"},
                        {"MASTER_ADDR", "b2"},
                        {"MASTER_PORT", "1234"}});
  EXPECT_EQ(e.manager, "slurm");
  EXPECT_EQ(e.head_host, "a1");
}

}  // namespace
}  // namespace troupe::cluster
