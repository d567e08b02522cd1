// The head: the cluster's control plane, as one actor (HeadService) on node 0
// of a head process (HeadServer). It keeps the node table (heartbeats, a
// failure detector), the resource ledger and scheduler, placement groups,
// the actor directory with cluster-wide names, a KV store for rendezvous and
// an event log. Data never passes through it: nodes call each other's actors
// directly.
//
// Jobs. Every driver is a job, from its registration until it leaves or is
// lost. The actors it spawns, the placement groups it creates and the
// collective groups it (or one of its actors) forms belong to it, and are
// removed when it ends - within the failure-detection budget when the driver
// dies - unless made detached (Ray's lifetime="detached"), which live until
// killed or removed (`troupe kill`, `troupe pg remove`).
//
// Failure semantics. A node is declared dead when it misses heartbeats for
// the budget (1 s by default, longer in a cluster so big that heartbeats are
// spaced out: HeadConfig) or at once when its connection breaks: the head
// holds one to every ready worker, and peers report those they hold. Its actors with restarts left
// are re-created on live nodes (same ActorId; their on_restart runs); the others die with ActorDied
// naming the node and the reason. Every node learns of it with its next
// heartbeat and fails the calls it has in flight there.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "core/actor.h"
#include "core/actor_declare.h"
#include "core/cluster/detail/head_ids.h"
#include "core/cluster/detail/head_records.h"
#include "core/cluster/detail/metrics_store.h"
#include "core/cluster/detail/node.h"
#include "core/cluster/detail/scheduler.h"
#include "core/cluster/protocol.h"

namespace troupe::cluster {

class NodeAgent;

struct HeadConfig {
  // How often nodes heartbeat, at the least. As the cluster grows the head
  // spaces heartbeats out so that all of them together come at most
  // `max_heartbeat_rate` a second (2,000 nodes: every 200 ms), telling each
  // node with its replies.
  absl::Duration heartbeat_interval = absl::Milliseconds(100);
  double max_heartbeat_rate = 10000;
  // The failure-detection budget: a node silent this long is declared dead.
  // At least 5 heartbeat intervals, whatever is set.
  absl::Duration heartbeat_timeout = absl::Seconds(1);
  // A head that took over from another (its store keeps records: etcd)
  // waits this long for the nodes its predecessor knew to rejoin it; those
  // that do not are declared dead then (their actors restarted elsewhere,
  // their jobs failed). Zero: 3 heartbeat timeouts.
  absl::Duration rejoin_grace = absl::ZeroDuration();
};

// How often the head process runs the failure detector (HeadService::tick).
inline constexpr absl::Duration kTickPeriod = absl::Milliseconds(50);

class HeadService {
 public:
  // `stopped` is set when stop() is called (the head process then exits).
  // `ids`: where node, actor and group ids come from (kept in the state
  // directory, so that a restarted head hands out none twice);
  // `incarnation`: this start of the head, told to every node.
  // `watch_node`: opens the head's connection to a worker that became ready,
  // off the head's thread (so that its loss is heard of at once); may be empty.
  // `records`: where its decisions are kept (head_records.h), committed
  // before the requests that made them are answered; `restored`: what an
  // earlier leader kept there (empty for a fresh cluster, and with the state
  // directory).
  HeadService(Node* node, HeadConfig config, std::shared_ptr<std::atomic<bool>> stopped,
              HeadIds ids, uint64_t incarnation, std::function<void(uint32_t)> watch_node,
              std::shared_ptr<RecordWriter> records, HeadRecords restored);

  // Nodes. Errors: those of drawing an id (HeadIds::next_node), and of
  // keeping the node's record.
  Future<Registration> register_node(NodeInfo info);
  // A node of an earlier start of this head (which stopped or crashed) joins
  // this one under the index it had, with the actors it hosts; the head's
  // directory takes them as alive there. Placement groups are not restored:
  // the rejoined actors hold their resources on their node directly.
  // Errors: AlreadyExists (this head knows the index: the node was declared
  // dead, or rejoined already), InvalidArgument (not a node index).
  // A head that took over from another (HeadConfig::rejoin_grace) takes back
  // the actors and placement groups its predecessor kept too.
  Future<Registration> rejoin_node(RejoinRequest request);
  // A registered worker is ready to host actors (its agent runs): from now
  // on the scheduler may place actors there.
  void node_ready(uint32_t node);
  HeartbeatReply heartbeat(uint32_t node, uint64_t seen_version);
  // `reporter` lost its connection to `node`: the node is declared dead now.
  void report_lost(uint32_t reporter, uint32_t node, std::string reason);
  // Node `reporter` (a training job's driver) found `node` hung - alive to
  // the failure detector, but making no progress: the node is declared dead
  // now, as if lost (fencing). Its actors are restarted elsewhere, and the
  // node, told so, stops. A node of an earlier start of the head that has
  // not rejoined this one is recorded dead, so that it cannot rejoin with
  // actors that were replaced meanwhile. InvalidArgument for the head's own
  // node or an index no head handed out; OK for one already dead.
  absl::Status fence_node(uint32_t reporter, uint32_t node, std::string reason);
  // A node leaving in order (a driver that is done, a worker stopped by hand).
  void unregister_node(uint32_t node, std::string reason);
  // Drains worker `node` (`troupe drain`): it takes no new actors or
  // placement-group bundles from now on, and every node is told (an event),
  // so that elastic jobs leave it at their next step boundary; `reason` is
  // shown with it. With `draining` false the node takes new work again.
  // NotFound for an unknown node, FailedPrecondition for a dead one,
  // InvalidArgument for one that is not a worker.
  absl::Status drain_node(uint32_t node, bool draining, std::string reason);

  // Actors.
  Future<ActorLocation> spawn_actor(SpawnRequest request);
  absl::StatusOr<ActorLocation> get_actor(std::string name);
  // Where a node listens. NotFound if unknown, Unavailable if dead.
  absl::StatusOr<std::vector<std::string>> node_endpoints(uint32_t node);
  // Where actor `id` lives. Unavailable while it is being restarted,
  // ActorDied once it is gone for good, NotFound if never known.
  absl::StatusOr<uint32_t> locate(uint64_t id);
  // How often a lost call of one of actor `id`'s idempotent methods may be
  // sent again (SpawnOptions::max_task_retries). NotFound if never known.
  absl::StatusOr<int32_t> task_retries(uint64_t id);
  // Reported by a node: actor `id` terminated for good there.
  void actor_died(uint64_t id, std::string reason);
  absl::Status kill_actor(uint64_t id, bool no_restart);
  // Completes with the reason when actor `id` terminates for good.
  Future<std::string> watch_actor(uint64_t id);

  // Placement groups (Ray's semantics; bundles as "CPU=1,GPU=1"), asked
  // for by node `owner`: a driver's job owns the group unless `detached`.
  // `targets`: empty, or per bundle the node it should go to, -1 for none
  // (Scheduler::create_placement_group).
  Future<uint64_t> create_placement_group(std::vector<std::string> bundles, std::string strategy,
                                          std::string name, uint32_t owner, bool detached,
                                          std::vector<int32_t> targets);
  // Whether group `id` is placed. ResourceExhausted, naming the shortfall,
  // if it cannot be placed even on an idle cluster of the nodes there are.
  absl::StatusOr<bool> placement_group_ready(uint64_t id);
  absl::Status remove_placement_group(uint64_t id);

  // Collective group `name` is formed from node `node` (by actor `actor`,
  // or 0 from outside an actor): it belongs to the job of that driver, or of
  // that actor, and its KV keys go with the job. AlreadyExists if another
  // running job owns the name.
  absl::Status claim_collective_group(std::string name, uint32_t node, uint64_t actor);

  // KV store (rendezvous): put returns false when the key exists and
  // `overwrite` is false. A put or delete is answered once it is kept
  // (with etcd: committed).
  Future<bool> kv_put(std::string key, std::string value, bool overwrite);
  std::optional<std::string> kv_get(std::string key);
  Future<bool> kv_delete(std::string key);
  std::vector<std::string> kv_keys(std::string prefix);

  // What job `job`'s driver reports of it after a step (Cluster::report_metrics): kept while
  // the job is (among the latest ended ones) in status(). A report for no job is dropped.
  void report_metrics(uint32_t job, MetricsReport report);
  // All the head keeps of job `job`'s reports (MetricsStore). NotFound for a job it does not
  // keep.
  absl::StatusOr<JobMetrics> job_metrics(uint32_t job);

  ClusterStatus status();
  // Asks every worker to exit, then the head itself.
  void stop();
  // The failure detector's clock: called by the head process every few ms.
  // When the head itself was held up (stopped, swapped out, or too busy to
  // run it) for longer than a tick, the nodes are given that time back: no
  // one is declared dead for heartbeats the head was not there to hear.
  void tick();

 private:
  struct NodeRecord {
    NodeInfo info;
    NodeState state = NodeState::kAlive;
    std::string death_reason;
    absl::Time last_heartbeat;
    uint64_t seen_version = 0;  // of the events, as its last heartbeat said
    bool ready = false;
    bool draining = false;
    std::string drain_reason;
  };
  struct JobRecord {
    NodeInfo driver;
    JobState state = JobState::kRunning;
    std::string end_reason;
    MetricsStore metrics;
  };
  struct ActorRecord {
    uint64_t id = 0;
    uint32_t job = 0;  // 0: detached (or spawned by no driver)
    SpawnRequest spawn;
    uint32_t node = 0;
    Placement placement;
    Resources resources;
    ActorState state = ActorState::kPending;
    int32_t restarts = 0;
    uint64_t attempt = 0;  // of hosting it; a late answer to an older one is ignored
    // Kept by the head this one took over from; its node has not rejoined
    // yet (state kRestarting meanwhile).
    bool awaiting_rejoin = false;
    std::string death_reason;
    std::vector<Promise<std::string>> watchers;
  };

  ActorRef<NodeAgent> agent(uint32_t node);
  // The running job that what node `owner` asks for belongs to, or 0.
  uint32_t job_of(uint32_t owner, bool detached) const;
  // Job `job` ended: what it owns is removed.
  void end_job(uint32_t job, JobState state, const std::string& reason);
  // Kills actor `actor` for good wherever it is (or would be) hosted.
  void remove_actor(ActorRecord& actor, const std::string& reason);
  // Records node `info` (its index set) as alive; the registration to send it.
  Registration admit(const NodeInfo& info);
  // Takes actor `a`, hosted on `node` under an earlier head, into the directory.
  void adopt(uint32_t node, const HostRequest& a);
  void record(ClusterEvent event);
  // Whether nodes of `kind` are told of `event` (see ClusterEvent).
  static bool tells(const ClusterEvent& event, NodeKind kind);
  // Drops the events every live node has seen.
  void trim_events();
  // How often nodes heartbeat now, and the budget for missing them.
  absl::Duration heartbeat_interval() const;
  absl::Duration failure_budget() const;
  void log(std::string line);
  void declare_dead(uint32_t node, const std::string& reason);
  // Places and hosts `actor` (its first start, or a restart after its node
  // was lost); completes with its location.
  Future<ActorLocation> host(uint64_t id, int32_t restart_count, std::string restart_reason);
  void actor_gone(ActorRecord& actor, const std::string& reason);
  // Restarts actors waiting for room (after a node joined or resources freed).
  void retry_waiting();
  bool restartable(const ActorRecord& actor) const {
    return actor.spawn.max_restarts < 0 || actor.restarts < actor.spawn.max_restarts;
  }

  // Keeping records (head_records.h). Each returns when the change is
  // committed; changes commit in the order they were made, so waiting for
  // the last one made waits for all.
  Future<void> save_node(const NodeInfo& info);
  Future<void> save_job(uint32_t job);
  Future<void> save_actor(const ActorRecord& actor);
  Future<void> save_group(uint64_t group);
  Future<void> forget(std::string record);
  // Takes what the head before this one kept (the constructor).
  void restore(HeadRecords restored);
  // The rejoin grace ran out: the nodes kept that did not rejoin are dead.
  void end_rejoin_grace();
  Node* const node_;
  const HeadConfig config_;
  const std::function<void(uint32_t)> watch_node_;
  const std::shared_ptr<RecordWriter> records_;
  Scheduler scheduler_;
  HeadIds ids_;
  const uint64_t incarnation_;
  const absl::Time started_ = absl::Now();
  absl::Time last_tick_ = absl::Now();
  absl::Time last_trim_ = absl::Now();
  int64_t alive_ = 0;  // nodes alive, the head's own not counted
  uint64_t version_ = 0;
  std::shared_ptr<std::atomic<bool>> stopped_;
  std::map<uint32_t, NodeRecord> nodes_;
  std::map<uint64_t, ActorRecord> actors_;
  std::map<uint32_t, JobRecord> jobs_;               // by driver node
  std::map<uint64_t, uint32_t> group_jobs_;          // placement group -> its job
  std::map<std::string, uint32_t> collective_jobs_;  // collective group -> its job
  absl::flat_hash_map<std::string, uint64_t> names_;
  std::set<uint64_t> waiting_;  // restarts that found no room yet
  // The nodes kept by the head this one took over from that have not
  // rejoined, until rejoin_deadline_.
  std::map<uint32_t, NodeInfo> expected_;
  absl::Time rejoin_deadline_;
  std::map<std::string, std::string> kv_;
  std::deque<ClusterEvent> events_;  // those some live node has not seen, oldest first
  std::deque<std::string> log_;
};
TROUPE_ACTOR_DECLARE(HeadService, &HeadService::register_node, &HeadService::node_ready,
                     &HeadService::heartbeat, &HeadService::report_lost,
                     &HeadService::unregister_node, &HeadService::rejoin_node,
                     &HeadService::spawn_actor, &HeadService::get_actor,
                     &HeadService::node_endpoints, &HeadService::locate, &HeadService::actor_died,
                     &HeadService::kill_actor, &HeadService::watch_actor,
                     &HeadService::task_retries, &HeadService::create_placement_group,
                     &HeadService::placement_group_ready, &HeadService::remove_placement_group,
                     &HeadService::claim_collective_group, &HeadService::kv_put,
                     &HeadService::kv_get, &HeadService::kv_delete, &HeadService::kv_keys,
                     &HeadService::status, &HeadService::stop, &HeadService::tick,
                     &HeadService::fence_node, &HeadService::drain_node,
                     &HeadService::report_metrics, &HeadService::job_metrics);

// The head process: a node 0 listening on the control port, hosting the
// HeadService and driving its failure detector.
struct HeadOptions {
  std::string host = "127.0.0.1";  // where to listen ("0.0.0.0" for every interface)
  uint16_t port = 6380;            // 0 picks a free one
  std::string token;
  HeadConfig config;
  int threads = 2;
  // Where the ids handed out are kept (HeadIds); empty: nowhere.
  std::string state_dir;
  // Where the head keeps its decisions (head_store.h); null: `state_dir`.
  std::shared_ptr<HeadStore> store;
  // Called once, from another thread, when the store refuses a write (with
  // etcd: this head no longer leads). The head answers nothing more that
  // would change a record; the process should exit.
  std::function<void(absl::Status)> on_store_failure;
};

class HeadServer {
 public:
  static absl::StatusOr<std::unique_ptr<HeadServer>> start(HeadOptions options);
  ~HeadServer();

  // "tcp://host:port": where workers and drivers reach the head.
  std::string address() const;
  ActorRef<HeadService> service() const { return service_; }
  // Blocks until stop() was called on the service, or `timeout` passes;
  // true if stopped.
  bool wait_stopped(absl::Duration timeout);

 private:
  HeadServer() = default;
  // The watcher thread: opens the head's connection to each node queued.
  void watch_nodes();

  std::shared_ptr<RecordWriter> records_;
  std::unique_ptr<Node> node_;
  ActorRef<HeadService> service_;
  std::shared_ptr<std::atomic<bool>> stopped_ = std::make_shared<std::atomic<bool>>(false);
  std::thread clock_;
  std::atomic<bool> done_{false};
  // Opens the head's connections to workers that became ready, one at a time.
  std::thread watcher_;
  std::mutex watch_mu_;
  std::condition_variable watch_cv_;
  std::deque<uint32_t> to_watch_;
};

}  // namespace troupe::cluster
