// What nodes and the head say to each other. The control plane is itself
// made of actors - the head's HeadService and each node's NodeAgent - so these
// are the argument and result types of their methods, made codable with
// TROUPE_FIELDS.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/cluster/gpu_inventory.h"
#include "core/codec.h"
#include "core/ids.h"

namespace troupe::cluster {

// The head is node 0; its service, and every node's agent, are the first
// actor of their node.
inline constexpr uint32_t kHeadNode = 0;
inline constexpr uint32_t kUnassignedNode = 0xffff;
inline ActorId head_service_id() {
  return ActorId::make(kHeadNode, 1);
}
inline ActorId node_agent_id(uint32_t node) {
  return ActorId::make(node, 1);
}
// The head's cluster-wide ActorIds live under this node index: they stay the
// same when an actor moves. Only these can move, so only these are ever
// located through the head. Node indices run from 1 to kLastNode.
inline constexpr uint32_t kClusterActorNode = 0xfffe;
inline constexpr uint32_t kLastNode = 0xfffd;
inline bool is_cluster_actor(ActorId id) {
  return id.node() == kClusterActorNode;
}

// KV keys of collective group `name` (core/cluster/collective_group.h) start
// with this; the head removes them with the job that owns the group.
inline std::string collective_group_kv_prefix(const std::string& name) {
  return "collective/" + name + "/";
}

// The KV key under which the head publishes its HTTP status's URL
// ("http://HOST:PORT/") when it serves one.
inline constexpr char kHttpUrlKey[] = "cluster/http_url";

enum class NodeKind : uint8_t { kWorker = 0, kDriver = 1 };
// A job is a driver's run: it starts when the driver joins and ends when it
// leaves in order (finished) or is lost (failed).
enum class JobState : uint8_t { kRunning = 0, kFinished = 1, kFailed = 2 };
enum class NodeState : uint8_t { kAlive = 0, kDead = 1 };
enum class ActorState : uint8_t { kPending = 0, kAlive = 1, kRestarting = 2, kDead = 3 };

std::string_view to_string(NodeKind kind);
std::string_view to_string(NodeState state);
std::string_view to_string(ActorState state);
std::string_view to_string(JobState state);

struct NodeInfo {
  uint32_t index = kUnassignedNode;
  NodeKind kind = NodeKind::kWorker;
  std::string name;  // "worker 10.0.0.5 pid 4242"
  std::string host;
  int64_t pid = 0;
  std::vector<std::string> endpoints;  // data plane, best first
  std::string resources;               // total, "CPU=2,GPU=0,memory=8G"
  // A worker's GPUs, one per unit of its GPU resource, by device index (a
  // stand-in named "GPU" of unknown memory for one it declares but NVML
  // does not show); empty for drivers.
  std::vector<GpuDevice> gpus;
  TROUPE_FIELDS(index, kind, name, host, pid, endpoints, resources, gpus);
};

// What a node learns at registration and then with each heartbeat: what
// changed in the cluster since the version it last saw.
//
// Who is told what. Every node learns of nodes that died and actors that
// moved (its calls there must fail or follow). Only drivers learn of nodes
// that joined, became ready or are draining (an elastic job watches the
// membership): a worker asks the head for a node's endpoints when it first
// calls there, so that a cluster of N nodes does not send N x N joins.
// kActorDied is not sent (a call to a dead actor is refused by its node).
struct ClusterEvent {
  // kNodeReady: a worker that joined can host actors now; kNodeDraining: a
  // node is being drained (`reason` non-empty) or no longer (empty).
  enum Kind : uint8_t {
    kNodeJoined = 0,
    kNodeDied = 1,
    kActorMoved = 2,
    kActorDied = 3,
    kNodeReady = 4,
    kNodeDraining = 5,
  };
  uint64_t version = 0;
  Kind kind = kNodeJoined;
  NodeInfo node;         // joined: the node; died, ready, draining: its index (and name)
  std::string reason;    // died, draining: why
  uint64_t actor = 0;    // moved / died: the actor
  uint32_t to_node = 0;  // moved: where it lives now
  TROUPE_FIELDS(version, kind, node, reason, actor, to_node);
};

struct Registration {
  uint32_t index = 0;          // the node's index, for its lifetime
  int64_t heartbeat_ms = 100;  // how often to send heartbeats (until a reply says otherwise)
  // The cluster so far, then the node's own join (whose version it carries
  // on from): for a driver every live node, for a worker nothing else.
  std::vector<ClusterEvent> events;
  uint64_t head_incarnation = 0;  // which start of the head this is
  TROUPE_FIELDS(index, heartbeat_ms, events, head_incarnation);
};

struct HeartbeatReply {
  // false: this head does not know the node as alive. With the incarnation
  // the node registered with, the head declared it dead (it must leave, or
  // join again as a new node); with another, the head was restarted and the
  // node rejoins it (HeadService::rejoin_node).
  bool known = true;
  std::vector<ClusterEvent> events;  // those for this node since the version it saw
  uint64_t head_incarnation = 0;
  // The head's version now: what the node has seen, the events above
  // included (it sends it with its next heartbeat).
  uint64_t version = 0;
  // How often to send heartbeats from now on: the head spaces them out as
  // the cluster grows (HeadConfig), 0 if unchanged.
  int64_t heartbeat_ms = 0;
  TROUPE_FIELDS(known, events, head_incarnation, version, heartbeat_ms);
};

// Spawning an actor somewhere in the cluster.
struct SpawnRequest {
  std::string type;          // registered actor type name
  uint64_t constructor = 0;  // signature id of the constructor's parameters
  std::string args;          // the constructor arguments, Codec-encoded
  std::string name;          // cluster-wide name, or empty
  int32_t max_restarts = 0;
  bool dedicated_thread = false;
  uint64_t mailbox_capacity = 1024;
  std::string resources;  // "CPU=1,GPU=1": held while alive
  uint64_t placement_group = 0;
  int32_t bundle_index = -1;
  int32_t node = -1;  // pin to a node, or -1
  // The node that asked. When it is a driver, the actor belongs to its job
  // and goes with it, unless `detached` (Ray's lifetime="detached").
  uint32_t owner = 0;
  bool detached = false;
  int32_t max_task_retries = 0;
  TROUPE_FIELDS(type, constructor, args, name, max_restarts, dedicated_thread, mailbox_capacity,
                resources, placement_group, bundle_index, node, owner, detached, max_task_retries);
};

struct ActorLocation {
  uint64_t id = 0;
  uint32_t node = 0;
  std::string type;
  TROUPE_FIELDS(id, node, type);
};

// What a node agent is asked to host.
struct HostRequest {
  uint64_t id = 0;  // the actor's cluster-wide id (kept across restarts)
  SpawnRequest spawn;
  int32_t restart_count = 0;  // > 0: a restart after its node was lost
  std::string restart_reason;
  TROUPE_FIELDS(id, spawn, restart_count, restart_reason);
};

// A node telling a restarted head who it is: its index and endpoints as the
// previous head assigned them, and the actors it hosts (so that the head's
// directory - names, locations - is rebuilt from the nodes themselves).
struct RejoinRequest {
  NodeInfo info;  // info.index: the index it was given
  std::vector<HostRequest> actors;
  TROUPE_FIELDS(info, actors);
};

struct NodeStatus {
  NodeInfo info;
  NodeState state = NodeState::kAlive;
  std::string available;  // resources not held by actors or placement groups
  std::string death_reason;
  int64_t actors = 0;             // alive actors on it
  int64_t last_heartbeat_ms = 0;  // ago
  bool ready = false;             // a worker that can host actors (its agent runs)
  // Being drained (`troupe drain`): it takes no new actors, and elastic jobs
  // leave it at their next step; why, as given.
  bool draining = false;
  std::string drain_reason;
  TROUPE_FIELDS(info, state, available, death_reason, actors, last_heartbeat_ms, ready, draining,
                drain_reason);
};

struct ActorStatus {
  uint64_t id = 0;
  std::string type;
  std::string name;
  uint32_t node = 0;
  ActorState state = ActorState::kPending;
  int32_t restarts = 0;
  std::string death_reason;
  uint32_t job = 0;  // the driver node whose job owns it; 0: detached
  TROUPE_FIELDS(id, type, name, node, state, restarts, death_reason, job);
};

struct PlacementGroupStatus {
  uint64_t id = 0;
  std::string name;
  std::string strategy;
  std::vector<std::string> bundles;
  bool placed = false;
  std::vector<uint32_t> bundle_nodes;
  uint32_t job = 0;  // the driver node whose job owns it; 0: detached
  TROUPE_FIELDS(id, name, strategy, bundles, placed, bundle_nodes, job);
};

// One value a job reports of itself (a training job's: trainers/job_metrics.h
// names them): `name` as Prometheus spells it, without the "troupe_train_"
// prefix the head adds (a name ending in "_total" is a counter, the rest
// gauges); `labels` as Prometheus writes them between braces, without the
// job's (`rank="d0.p0.t0",category="parameters"`), or empty.
struct MetricPoint {
  std::string name;
  std::string labels;
  double value = 0;
  TROUPE_FIELDS(name, labels, value);
};

// What a metric means, for Prometheus' HELP line and the dashboard.
struct MetricHelp {
  std::string name;
  std::string text;
  TROUPE_FIELDS(name, text);
};

// One span of a job's timeline: what ran on `track` (a rank, "d0.p1.t0")
// from begin_ms to end_ms (each track's times from its own start), named for
// people ("forward 3"); `kind` groups spans for colour ("forward",
// "backward", "send", "receive").
struct TimelineSpan {
  std::string track;
  std::string kind;
  std::string name;
  double begin_ms = 0;
  double end_ms = 0;
  TROUPE_FIELDS(track, kind, name, begin_ms, end_ms);
};

// A step's timeline as a report carried it.
struct JobTimeline {
  int64_t step = 0;
  std::vector<TimelineSpan> spans;
  TROUPE_FIELDS(step, spans);
};

// What a job's driver tells the head after a step (Cluster::report_metrics):
// its values then - each replaces the last of its name and labels - and the
// events since the last report, one line each for people ("recovery: ...").
struct MetricsReport {
  int64_t step = 0;
  double unix_seconds = 0;  // when the driver measured them
  std::vector<MetricPoint> points;
  std::vector<std::string> events;
  std::vector<MetricHelp> help;  // new names' meanings (sent again is harmless)
  // The step's schedule as it ran on each rank, when the job sends one (a
  // pipeline's): the head keeps the latest.
  std::vector<TimelineSpan> timeline;
  TROUPE_FIELDS(step, unix_seconds, points, events, help, timeline);
};

// A job's reports as the head keeps them: the latest value of every series,
// and a bounded history of the reports' job-wide values (all but those
// labelled rank=...; thinned evenly as it grows: it spans the whole run at a
// coarser grain) and of the events, for the dashboard.
struct JobMetrics {
  uint32_t job = 0;
  int64_t step = 0;  // of the latest report
  std::vector<MetricPoint> latest;
  std::vector<MetricsReport> history;  // oldest first; their events are in `events`
  std::vector<std::string> events;     // oldest first, each "step N: ..."
  std::vector<MetricHelp> help;
  std::vector<JobTimeline> timelines;  // the last few reports' that carried one, oldest first
  TROUPE_FIELDS(job, step, latest, history, events, help, timelines);
};

// A job and what it owns (removed with it when it ends, but for what was
// made detached).
struct JobStatus {
  uint32_t id = 0;  // its driver's node index
  std::string driver;
  int64_t pid = 0;
  JobState state = JobState::kRunning;
  std::string end_reason;
  int64_t actors = 0;  // alive, owned by the job
  std::vector<uint64_t> placement_groups;
  std::vector<std::string> collective_groups;
  // What the job says of itself, for people: a training job's layout, step
  // and dp history (the KV key "job/<id>/training"); empty if nothing.
  std::string training;
  // Its latest reported values (Cluster::report_metrics), and their step.
  int64_t step = 0;
  std::vector<MetricPoint> metrics;
  std::vector<MetricHelp> metrics_help;
  TROUPE_FIELDS(id, driver, pid, state, end_reason, actors, placement_groups, collective_groups,
                training, step, metrics, metrics_help);
};

struct ClusterStatus {
  std::vector<NodeStatus> nodes;
  std::vector<ActorStatus> actors;
  std::vector<PlacementGroupStatus> placement_groups;
  std::vector<std::string> events;  // the most recent, oldest first
  std::vector<JobStatus> jobs;
  // The head started within its rejoin window (3 failure-detection budgets)
  // ago: nodes of an earlier start of it may still be rejoining, so an actor
  // it does not know may yet appear. Past it, one it does not know was on a
  // node lost while the head was down.
  bool rejoining = false;
  TROUPE_FIELDS(nodes, actors, placement_groups, events, jobs, rejoining);
};

}  // namespace troupe::cluster
