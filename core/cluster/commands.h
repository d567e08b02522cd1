// The cluster commands of the `troupe` executable, as Ray users know them:
//
//   troupe head   [--port 6380] [--host 127.0.0.1] [--state-dir /tmp/troupe]   (ray start --head)
//   troupe worker --head HOST:PORT [--resources CPU=2,GPU=0,memory=8G]       (ray start --address)
//                 [--token-file PATH] [--actor-lib PATH]... [--actor-lib-dir DIR]...
//   troupe status [--head HOST:PORT] [--token-file PATH]                       (ray status)
//   troupe stop   [--head HOST:PORT] [--token-file PATH]                       (ray stop)
//   troupe kill   ACTOR [--restart] [--head HOST:PORT] [--token-file PATH]     (ray.kill)
//   troupe pg     list | remove GROUP [--head HOST:PORT] [--token-file PATH]
//                                                     (ray.util.remove_placement_group)
//
// Each takes its arguments after the command name and returns the process's
// exit code (the Exit values below), which Slurm's --kill-on-bad-exit and a
// Kubernetes podFailurePolicy can act on.
//
// Under a cluster manager (core/cluster/launch_env.h) `troupe head` listens
// where the launch environment says, and `troupe worker` finds the head
// there; the worker of rank 0 starts that head itself, so one
// `srun troupe worker` (or one container command) brings up the cluster.
#pragma once

#include <string>
#include <vector>

namespace troupe::cluster {

enum Exit : int {
  kExitOk = 0,       // done: stopped in order (`troupe stop`, SIGTERM, Ctrl-C)
  kExitFailed = 1,   // could not start or join (the message says why)
  kExitUsage = 2,    // bad flags or launch environment
  kExitHeadLost = 3  // a worker lost its head for longer than --head-timeout: the cluster is gone
};

int head_command(const std::vector<std::string>& args);
int worker_command(const std::vector<std::string>& args);
int status_command(const std::vector<std::string>& args);
int stop_command(const std::vector<std::string>& args);
int kill_command(const std::vector<std::string>& args);
int pg_command(const std::vector<std::string>& args);
// `troupe drain NODE`: the node takes no new actors, elastic jobs leave it at
// their next step, and the command waits until it hosts none (kubectl drain).
int drain_command(const std::vector<std::string>& args);

}  // namespace troupe::cluster
