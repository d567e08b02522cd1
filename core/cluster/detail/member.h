// Joining a cluster: what a worker or a driver does first. A Member starts a
// node, registers it with the head (which assigns its index), and then keeps
// it in step: heartbeats, and with each reply what changed in the cluster
// (nodes that joined or died, actors that moved), applied to the node so that
// calls go to the right place and fail at once when their node is gone.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/cluster/detail/agent.h"
#include "core/cluster/detail/head.h"
#include "core/cluster/detail/node.h"
#include "core/cluster/gpu_inventory.h"
#include "core/cluster/launch_env.h"
#include "core/cluster/protocol.h"

namespace troupe::cluster {

struct MemberOptions {
  // "HOST:PORT" of the head's control port; with standby heads (a store on
  // etcd) every head's, comma-separated: the node registers with the one
  // that answers (the leader: standbys do not listen) and, when it stops
  // answering, tries the others in turn and rejoins the one that took over.
  // Or the heads' etcd, "etcd://HOST:PORT,...[/PREFIX/]": the node asks it
  // which head leads, at first and whenever the head stops answering.
  std::string head;
  std::string token;  // the cluster token
  NodeKind kind = NodeKind::kWorker;
  std::string name;       // for status and logs; default "<kind> <host> pid <pid>"
  std::string resources;  // workers: what they offer, "CPU=2,GPU=0,memory=8G"
  // Workers: their GPUs (gpu_inventory()). join() makes them match the GPU
  // amount of `resources` (gpus_for_count): its first GPU=N, or stand-ins
  // for those it does not know.
  std::vector<GpuDevice> gpus;
  // The address other nodes reach this one at; empty: the local address of
  // the route to the head.
  std::string host;
  std::vector<std::string> transports = {"ucx", "tcp"};
  int threads = 0;
  absl::Duration timeout = absl::Seconds(10);  // to reach the head at start
  // How long the head may stay unreachable before this node gives up (as
  // Ray's raylets wait for a restarted GCS). Meanwhile the node keeps serving
  // calls from its peers, and when a head answers again - restarted on the
  // same state directory, so with the same token - rejoins it under its index
  // with the actors it hosts.
  absl::Duration head_grace = absl::Seconds(60);
  // How long a call to an actor that is being restarted (its node was lost)
  // waits for it to be back before it fails with Unavailable.
  absl::Duration restart_wait = absl::Seconds(30);
};

// Code to run when the head declares a node dead - another one, or this one
// (told with this node's index) - so that collective groups with a member
// there abort at once instead of waiting out their timeout.
// Callbacks run on the member's heartbeat thread, one at a time, and must not
// add or remove listeners; remove() waits for a callback in progress.
class NodeDeathListeners {
 public:
  using Listener = std::function<void(uint32_t node, const std::string& reason)>;
  uint64_t add(Listener listener);
  void remove(uint64_t id);
  void notify(uint32_t node, const std::string& reason);

 private:
  std::mutex mu_;
  uint64_t next_ = 1;
  std::map<uint64_t, Listener> listeners_;
};

class Member {
 public:
  // Errors: InvalidArgument (bad address or resources: a worker offers a
  // whole number of GPUs), Unavailable (head unreachable), PermissionDenied
  // (wrong token), DeadlineExceeded.
  static absl::StatusOr<std::unique_ptr<Member>> join(MemberOptions options);
  // join(), tried again while the head is unreachable (Unavailable), for up
  // to `wait`: a node started with its cluster (a launch) may come before the
  // head listens, as a raylet before its GCS. `waiting` hears why, once, when
  // the first try fails so; `cancelled` (may be empty) ends the wait early.
  static absl::StatusOr<std::unique_ptr<Member>> join_when_head_up(
      const MemberOptions& options, absl::Duration wait,
      const std::function<void(const absl::Status&)>& waiting,
      const std::function<bool()>& cancelled = {});
  // Leaves the cluster in order (the head is told) and stops the node.
  ~Member();

  // The member this process joined the cluster as (a worker's, or a
  // driver's), while it lasts: what code running inside actors uses to reach
  // the head. The latest one when a process holds several. Null if none.
  static Member* current();

  Node& node() { return *node_; }
  const MemberOptions& options() const { return options_; }
  uint32_t index() const { return node_->index(); }
  ActorRef<HeadService> head() const { return head_; }
  const std::string& head_address() const { return options_.head; }
  // The head this node registered with last (one of head_address()'s).
  std::string current_head() const;
  std::shared_ptr<StopSignal> stop_signal() const { return stop_; }
  // The actors this node hosts, kept by its agent (told to a restarted head).
  std::shared_ptr<HostedActors> hosted() const { return hosted_; }
  std::shared_ptr<NodeDeathListeners> node_death_listeners() const { return death_listeners_; }
  // How many times this node rejoined a restarted head.
  int rejoins() const { return rejoins_.load(); }
  // Counts the node events heard of (joined, ready, draining, died).
  uint64_t membership_version() const { return membership_version_.load(); }
  // While the head does not answer this node's heartbeats (it is down, or
  // restarting): when it last did. nullopt while it answers. This node gives
  // up on it options().head_grace after that.
  std::optional<absl::Time> head_away_since() const;
  // Tells the head this worker can host actors (call once its agent runs).
  absl::Status ready();

  // Blocks until this node is asked to stop (the cluster stopped, the head
  // declared it dead, or the head was lost) or `timeout` passes; returns the
  // reason, or nullopt on timeout.
  std::optional<std::string> wait_stopped(absl::Duration timeout);

 private:
  explicit Member(MemberOptions options) : options_(std::move(options)) {}
  absl::Status start();
  void apply(const std::vector<ClusterEvent>& events);
  void heartbeats(absl::Duration interval);
  NodeInfo info() const;
  // The head declared this node dead: its groups abort, and it stops.
  void declared_dead(const std::string& why);
  // Joins a restarted head (incarnation `incarnation`) under this node's
  // index; if the head did not answer, the next heartbeat tries again.
  void rejoin(uint64_t incarnation);

  // Registers with the heads in turn, from heads_[head_at_], until one answers.
  absl::StatusOr<Registration> register_with_a_head();
  // Points the head's node index at the next head of heads_ (a failover).
  void try_next_head();

  const MemberOptions options_;
  mutable std::mutex heads_mu_;     // guards heads_'s contents (etcd: the leader changes)
  std::vector<std::string> heads_;  // options_.head, split; or the leader etcd names
  std::atomic<size_t> head_at_{0};  // the one in use
  std::unique_ptr<Node> node_;
  ActorRef<HeadService> head_;
  std::shared_ptr<StopSignal> stop_ = std::make_shared<StopSignal>();
  std::shared_ptr<HostedActors> hosted_ =
      std::make_shared<HostedActors>(static_cast<int>(options_.gpus.size()));
  std::shared_ptr<NodeDeathListeners> death_listeners_ = std::make_shared<NodeDeathListeners>();
  uint64_t seen_version_ = 0;      // heartbeat thread only (after start)
  uint64_t head_incarnation_ = 0;  // heartbeat thread only (after start)
  std::atomic<int> rejoins_{0};
  std::atomic<uint64_t> membership_version_{0};
  std::atomic<bool> leaving_{false};
  // head_away_since() in Unix nanoseconds, 0 while the head answers (shared
  // with the node's locate hook).
  std::shared_ptr<std::atomic<int64_t>> head_away_since_ =
      std::make_shared<std::atomic<int64_t>>(0);
  std::thread heartbeat_;
};

// Where the live actor named `name` is, asked of `member`'s head. Errors:
// NotFound (no live actor has the name), InvalidArgument (it is not of
// `type`), and those of reaching the head.
absl::StatusOr<ActorLocation> find_named_actor(Member& member, std::string_view name,
                                               const ActorTypeInfo& type, absl::Duration timeout);

// Where `troupe head` keeps its token and address unless told otherwise, and
// where workers, drivers and the other commands look for them when not told.
inline constexpr char kDefaultStateDir[] = "/tmp/troupe";

// Finding the cluster, as ray.init() finds one: `given` if not empty, else
// $TROUPE_HEAD / $TROUPE_TOKEN, else (the head only) the launch environment
// of Slurm, torchrun or a JobSet (core/cluster/launch_env.h), else the state
// directory of a head running on this machine. Errors name what to pass.
// `launched`, if given, is set to the launch environment the address came
// from (nullopt when it came from elsewhere).
absl::StatusOr<std::string> find_head_address(const std::string& given,
                                              std::optional<LaunchEnv>* launched = nullptr);
absl::StatusOr<std::string> find_cluster_token(const std::string& token_file);

// A failed call to the head, as a user should read it: without the runtime's
// "cannot reach node 0 (for actor-0-1): " prefix.
std::string head_error_text(const absl::Status& s);

// "127.0.0.1:6380" -> "127.0.0.1": the host to advertise for reaching the head
// (the local address of the route to it).
absl::StatusOr<std::string> local_address_towards(const std::string& head);

}  // namespace troupe::cluster
