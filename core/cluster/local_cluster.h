// LocalCluster: a head and N worker processes on this machine, on loopback,
// for tests and examples. It runs the `troupe` executable (head, worker) in
// child processes and tears them down when destroyed - also when a test
// fails, and (through PR_SET_PDEATHSIG) when this process dies.
//
//   auto cluster = LocalCluster::start({.workers = 3});
//   auto driver = Cluster::connect((*cluster)->client_options());
//   (*cluster)->kill_worker(1);          // SIGKILL, as a machine failure
#pragma once

#include <sys/types.h>

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/cluster/cluster.h"

namespace troupe::cluster {

struct LocalClusterOptions {
  int workers = 2;
  // Each worker's --resources, by position; missing ones get `default_resources`.
  std::vector<std::string> worker_resources;
  std::string default_resources = "CPU=2";
  // Each worker's CUDA_VISIBLE_DEVICES, by position ("0", "1,2"): the GPUs of this machine it
  // sees (and numbers from 0). Missing ones inherit this process's environment.
  std::vector<std::string> worker_visible_devices;
  // Extra flags for every worker, e.g. {"--actor-lib", path, "--actor-lib-dir", dir}.
  std::vector<std::string> worker_flags;
  // The troupe executable; empty: $TROUPE_BINARY, else "troupe" on the PATH.
  std::string troupe_binary;
  absl::Duration heartbeat_timeout = absl::Seconds(1);
  // "etcd://HOST:PORT/PREFIX/": the heads keep their decisions there
  // (`troupe head --store`), and `heads` of them run: one leads, the others
  // stand by. Workers and drivers are given every head's address.
  std::string store;
  int heads = 1;
  // Extra flags for every head, e.g. {"--lease-ttl", "1s"}.
  std::vector<std::string> head_flags;
  absl::Duration start_timeout = absl::Seconds(30);
  // Forward the children's output to this process's stderr, prefixed.
  bool echo_output = true;
};

// A free TCP port on loopback (bound, then released: another process may
// take it before it is used), or 0 if none.
uint16_t free_loopback_port();

class LocalCluster {
 public:
  static absl::StatusOr<std::unique_ptr<LocalCluster>> start(LocalClusterOptions options);
  // Stops every process still running (SIGTERM, then SIGKILL after a grace
  // period) and removes the state directory.
  ~LocalCluster();

  // Every head's "HOST:PORT", comma-separated (one, without a store).
  const std::string& head_address() const { return head_address_; }
  // The leading head's.
  const std::string& leader_address() const { return leader_address_; }
  // "HOST:PORT" of the head's HTTP status endpoint.
  const std::string& http_address() const { return http_address_; }
  const std::string& token_file() const { return token_file_; }
  const std::string& state_dir() const { return state_dir_; }
  // Options for Cluster::connect to this cluster.
  ClusterOptions client_options() const;

  int num_workers() const { return static_cast<int>(workers_.size()); }
  pid_t worker_pid(int i) const;
  uint32_t worker_node(int i) const;  // its node index in the cluster
  // Sends `sig` to worker `i` (SIGKILL: a machine failure).
  void kill_worker(int i, int sig = 9);
  // Whether worker `i`'s process is still running (not exited, not killed).
  bool worker_running(int i);
  // Lines worker `i` has printed so far.
  std::vector<std::string> worker_output(int i);
  pid_t head_pid() const { return head_ ? head_->pid : -1; }
  // Sends `sig` to the head (SIGKILL: the head's machine failing); with
  // standbys, to the leader.
  void kill_head(int sig = 9);
  // Starts the head again on the same port and state directory, after it
  // was killed; it keeps the token, so the workers rejoin it. Returns when
  // it listens. With a store, after a failover (wait_for_new_leader), the
  // killed head starts again as a standby: returns when it stands by.
  absl::Status restart_head();
  // With standbys: waits until one of them leads (after kill_head), which
  // is the head from then on; the time it took from the call.
  absl::StatusOr<absl::Duration> wait_for_new_leader(absl::Duration timeout);
  // The standby heads' pids.
  std::vector<pid_t> standby_pids() const;
  // The exit code of the head that led before the last failover, once it
  // exits (within `timeout`; nullopt if it does not, or there is none).
  std::optional<int> deposed_exit_code(absl::Duration timeout);
  // Starts another worker; returns its position. It has joined when this
  // returns. Not thread-safe with the other calls. The worker dies with the
  // thread that started it (PR_SET_PDEATHSIG follows the thread): call it
  // from one that outlives the worker.
  absl::StatusOr<int> add_worker(const std::string& resources);
  // Runs `troupe <args>` against this cluster (head and token filled in),
  // returning its exit code and output (stdout and stderr).
  std::pair<int, std::string> run_cli(const std::vector<std::string>& args) const;

 private:
  // A child process with its output collected line by line.
  struct Child {
    pid_t pid = -1;
    int exit_status = 0;  // waitpid's, once reaped
    std::string name;
    std::thread reader;
    std::mutex mu;
    std::condition_variable cv;
    std::vector<std::string> lines;
    bool closed = false;
  };

  explicit LocalCluster(LocalClusterOptions options) : options_(std::move(options)) {}
  // Runs the troupe executable with `args`; `env` ("NAME=value") added to or replacing this
  // process's environment.
  absl::StatusOr<std::unique_ptr<Child>> spawn(const std::string& name,
                                               const std::vector<std::string>& args,
                                               const std::vector<std::string>& env = {});
  // Waits for a line of `child`'s output that `match` accepts; returns it.
  absl::StatusOr<std::string> wait_line(Child& child,
                                        const std::function<bool(const std::string&)>& match,
                                        absl::Duration timeout);
  // `visible_devices`: its CUDA_VISIBLE_DEVICES; empty: inherited.
  absl::StatusOr<uint32_t> start_worker(const std::string& resources,
                                        const std::string& visible_devices = "");
  absl::Status start_head(uint16_t port);
  // Starts a head that stands by (with a store): returns when it says so.
  absl::Status start_standby(uint16_t port);
  std::vector<std::string> head_args(uint16_t port) const;
  void stop(Child& child);

  const LocalClusterOptions options_;
  std::string binary_;
  std::string state_dir_;
  std::string token_file_;
  std::string head_address_;
  std::string leader_address_;
  std::string http_address_;
  std::unique_ptr<Child> head_;  // the leader
  std::vector<std::unique_ptr<Child>> standbys_;
  std::unique_ptr<Child> deposed_;  // the leader before the last failover
  std::vector<std::unique_ptr<Child>> workers_;
  std::vector<uint32_t> worker_nodes_;
};

}  // namespace troupe::cluster
