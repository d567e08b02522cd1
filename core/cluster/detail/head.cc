#include "core/cluster/detail/head.h"

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "core/cluster/detail/agent.h"
#include "core/cluster/detail/gpu_assignment.h"
#include "spdlog/spdlog.h"

namespace troupe::cluster {
namespace {

constexpr size_t kLogLines = 1000;
constexpr size_t kEndedJobsKept = 100;
constexpr size_t kEndedJobsWithHistory = 5;  // their metrics' history; the rest keep the latest
// Times an actor is placed for its first start when its node is lost before
// it started there.
constexpr uint64_t kMaxPlacements = 8;

std::string seconds(absl::Duration d) {
  return absl::StrFormat("%.3g s", absl::ToDoubleSeconds(d));
}

// `value`, once `kept` (a record's change) is committed; its error if not.
// At once when it is (a store that keeps no records).
template <class T>
Future<T> once_kept(Future<void> kept, T value) {
  if (kept.ready()) {
    if (absl::Status s = kept.get(); !s.ok()) return Future<T>::failed(std::move(s));
    return make_ready_future(std::move(value));
  }
  return std::move(kept).then([value = std::move(value)]() mutable { return std::move(value); });
}

}  // namespace

HeadService::HeadService(Node* node, HeadConfig config, std::shared_ptr<std::atomic<bool>> stopped,
                         HeadIds ids, uint64_t incarnation,
                         std::function<void(uint32_t)> watch_node,
                         std::shared_ptr<RecordWriter> records, HeadRecords restored)
    : node_(node),
      config_(config),
      watch_node_(std::move(watch_node)),
      records_(std::move(records)),
      ids_(std::move(ids)),
      incarnation_(incarnation),
      stopped_(std::move(stopped)) {
  log("head started");
  restore(std::move(restored));
}

ActorRef<NodeAgent> HeadService::agent(uint32_t node) {
  return node_->ref<NodeAgent>(node_agent_id(node), node);
}

void HeadService::record(ClusterEvent event) {
  event.version = ++version_;
  events_.push_back(std::move(event));
}

bool HeadService::tells(const ClusterEvent& event, NodeKind kind) {
  switch (event.kind) {
    case ClusterEvent::kNodeDied:
    case ClusterEvent::kActorMoved:
      return true;
    case ClusterEvent::kNodeJoined:
    case ClusterEvent::kNodeReady:
    case ClusterEvent::kNodeDraining:
      return kind == NodeKind::kDriver;
    case ClusterEvent::kActorDied:
      return false;
  }
  return false;
}

void HeadService::trim_events() {
  uint64_t seen_by_all = version_;
  for (const auto& [index, n] : nodes_) {
    if (n.state == NodeState::kAlive) seen_by_all = std::min(seen_by_all, n.seen_version);
  }
  while (!events_.empty() && events_.front().version <= seen_by_all)
    events_.pop_front();
}

absl::Duration HeadService::heartbeat_interval() const {
  absl::Duration spaced = absl::Seconds(static_cast<double>(alive_) / config_.max_heartbeat_rate);
  // In whole 10 ms, so that nodes are not told of every node that joins.
  spaced = absl::Ceil(spaced, absl::Milliseconds(10));
  return std::max(config_.heartbeat_interval, spaced);
}

absl::Duration HeadService::failure_budget() const {
  return std::max(config_.heartbeat_timeout, 5 * heartbeat_interval());
}

void HeadService::log(std::string line) {
  spdlog::info("head: {}", line);
  log_.push_back(absl::StrCat(absl::FormatTime("%H:%M:%E3S ", absl::Now(), absl::LocalTimeZone()),
                              std::move(line)));
  if (log_.size() > kLogLines) log_.pop_front();
}

// --- Nodes ---------------------------------------------------------------------

Future<Registration> HeadService::register_node(NodeInfo info) {
  absl::StatusOr<uint32_t> index = ids_.next_node();
  if (!index.ok()) return Future<Registration>::failed(index.status());
  info.index = *index;
  Registration reply = admit(info);
  Future<void> kept = save_node(info);
  if (info.kind == NodeKind::kDriver) {
    jobs_[info.index] = JobRecord{.driver = info};
    kept = save_job(info.index);
  }
  log(absl::StrCat(std::string(to_string(info.kind)), " ", info.index, " joined: ", info.name,
                   info.kind == NodeKind::kWorker ? absl::StrCat(" [", info.resources, "]") : ""));
  return once_kept(std::move(kept), std::move(reply));
}

Future<Registration> HeadService::rejoin_node(RejoinRequest request) {
  auto refuse = [](absl::Status s) { return Future<Registration>::failed(std::move(s)); };
  const NodeInfo& info = request.info;
  if (info.index == kHeadNode || info.index > kLastNode) {
    return refuse(absl::InvalidArgumentError(absl::StrCat(info.index, " is not a node index")));
  }
  if (auto it = nodes_.find(info.index); it != nodes_.end()) {
    return refuse(absl::AlreadyExistsError(
        it->second.state == NodeState::kAlive
            ? absl::StrCat("node ", info.index, " has rejoined already")
            : absl::StrCat("node ", info.index, " was declared dead: ", it->second.death_reason)));
  }
  if (absl::Status s = ids_.saw_node(info.index); !s.ok()) return refuse(s);
  for (const HostRequest& a : request.actors) {
    if (absl::Status s = ids_.saw_actor(ActorId{a.id}.sequence()); !s.ok()) return refuse(s);
  }
  const bool expected = expected_.erase(info.index) > 0;
  Registration reply = admit(info);
  Future<void> kept = expected ? make_ready_future() : save_node(info);
  if (info.kind == NodeKind::kDriver &&
      jobs_.try_emplace(info.index, JobRecord{.driver = info}).second) {
    kept = save_job(info.index);
  }
  if (info.kind == NodeKind::kWorker) {
    absl::StatusOr<Resources> total = Resources::parse(info.resources);
    scheduler_.add_node(info.index, total.ok() ? *total : Resources());
    nodes_[info.index].ready = true;
    if (watch_node_) watch_node_(info.index);
    // Groups kept by an earlier leader are placed first, so that their
    // actors find their bundles.
    scheduler_.retry_pending();
    for (const HostRequest& a : request.actors) {
      // Kept again unless the record says so already (a head that took over
      // kept it, on this node).
      auto known = actors_.find(a.id);
      const bool recorded = known != actors_.end() && known->second.awaiting_rejoin &&
                            known->second.node == info.index;
      const bool alive_elsewhere = known != actors_.end() && !known->second.awaiting_rejoin;
      adopt(info.index, a);
      if (!recorded && !alive_elsewhere) kept = save_actor(actors_[a.id]);
    }
  }
  log(absl::StrCat(std::string(to_string(info.kind)), " ", info.index, " rejoined: ", info.name,
                   info.kind == NodeKind::kWorker ? absl::StrCat(" [", info.resources, "] with ",
                                                                 request.actors.size(), " actors")
                                                  : ""));
  scheduler_.retry_pending();
  retry_waiting();
  return once_kept(std::move(kept), std::move(reply));
}

void HeadService::adopt(uint32_t node, const HostRequest& a) {
  auto known = actors_.find(a.id);
  if (known != actors_.end() && !known->second.awaiting_rejoin) return;
  ActorRecord& actor = actors_[a.id];
  const bool kept = actor.awaiting_rejoin;
  actor.awaiting_rejoin = false;
  actor.id = a.id;
  actor.spawn = a.spawn;
  // Its job, if its driver rejoins too (a job the restarted head never
  // hears of again leaves the actor as if detached). A head that took over
  // knows the job from its predecessor's records.
  if (!kept) actor.job = a.spawn.detached ? 0 : a.spawn.owner;
  actor.node = node;
  actor.state = ActorState::kAlive;
  actor.death_reason.clear();
  actor.restarts = a.restart_count;
  absl::StatusOr<Resources> resources = Resources::parse(a.spawn.resources);
  PlacementRequest where;
  where.resources = resources.ok() ? *resources : Resources();
  where.node = node;
  // Its placement group, if the head kept it and placed the bundle on this
  // node again; otherwise the group was an earlier head's, and the actor now
  // holds its resources on its node directly.
  std::optional<Scheduler::GroupInfo> group =
      a.spawn.placement_group != 0 ? scheduler_.group(PlacementGroupId{a.spawn.placement_group})
                                   : std::nullopt;
  const int b = a.spawn.bundle_index;
  if (group && group->placed && b >= 0 && static_cast<size_t>(b) < group->bundle_nodes.size() &&
      group->bundle_nodes[b] == node) {
    where.group = group->id;
    where.bundle_index = b;
  } else {
    actor.spawn.placement_group = 0;
    actor.spawn.bundle_index = -1;
  }
  absl::StatusOr<Placement> placed = scheduler_.place_actor(where);
  if (placed.ok()) {
    actor.resources = where.resources;
    actor.placement = *placed;
  } else {
    // More than the node has left: it runs, but holds nothing in the ledger.
    log(absl::StrCat(to_string(ActorId{a.id}), " (", a.spawn.type, ") rejoined on node ", node,
                     " without its resources: ", placed.status().message()));
    actor.placement.node = node;
  }
  if (!actor.spawn.name.empty() && !names_.contains(actor.spawn.name)) {
    names_[actor.spawn.name] = a.id;
  }
}

Registration HeadService::admit(const NodeInfo& info) {
  Registration reply;
  reply.index = info.index;
  reply.head_incarnation = incarnation_;
  // A driver learns of the cluster so far: every live node, as if it had
  // just joined. (A worker asks for a node's endpoints when it first calls
  // there.)
  for (const auto& [index, n] : nodes_) {
    if (n.state != NodeState::kAlive || info.kind != NodeKind::kDriver) continue;
    ClusterEvent joined;
    joined.version = version_;
    joined.kind = ClusterEvent::kNodeJoined;
    joined.node = n.info;
    reply.events.push_back(std::move(joined));
  }
  node_->set_node_endpoints(info.index, info.endpoints);
  NodeRecord& n = nodes_[info.index];
  n.info = info;
  n.last_heartbeat = absl::Now();
  ++alive_;
  reply.heartbeat_ms = absl::ToInt64Milliseconds(heartbeat_interval());
  ClusterEvent joined;
  joined.kind = ClusterEvent::kNodeJoined;
  joined.node = info;
  record(joined);
  // Its own join comes last: the node carries on from that version.
  reply.events.push_back(events_.back());
  n.seen_version = version_;
  return reply;
}

void HeadService::node_ready(uint32_t node) {
  auto it = nodes_.find(node);
  if (it == nodes_.end() || it->second.state != NodeState::kAlive ||
      it->second.info.kind != NodeKind::kWorker) {
    return;
  }
  absl::StatusOr<Resources> total = Resources::parse(it->second.info.resources);
  scheduler_.add_node(node, total.ok() ? *total : Resources());
  scheduler_.set_draining(node, it->second.draining);  // (drained before it was ready)
  it->second.ready = true;
  ClusterEvent ready;
  ready.kind = ClusterEvent::kNodeReady;
  ready.node.index = node;
  ready.node.name = it->second.info.name;
  record(ready);
  if (watch_node_) watch_node_(node);
  scheduler_.retry_pending();
  retry_waiting();
}

absl::Status HeadService::drain_node(uint32_t node, bool draining, std::string reason) {
  if (node == kHeadNode) return absl::InvalidArgumentError("node 0 is the head, not a worker");
  auto it = nodes_.find(node);
  if (it == nodes_.end()) return absl::NotFoundError(absl::StrCat("no node ", node));
  NodeRecord& n = it->second;
  if (n.state != NodeState::kAlive) {
    return absl::FailedPreconditionError(
        absl::StrCat("node ", node, " is dead (", n.death_reason, ")"));
  }
  if (n.info.kind != NodeKind::kWorker) {
    return absl::InvalidArgumentError(absl::StrCat(
        "node ", node, " is a ", std::string(to_string(n.info.kind)), ", not a worker"));
  }
  if (reason.empty()) reason = "drained by hand";
  n.draining = draining;
  n.drain_reason = draining ? reason : "";
  scheduler_.set_draining(node, draining);
  ClusterEvent e;
  e.kind = ClusterEvent::kNodeDraining;
  e.node.index = node;
  e.node.name = n.info.name;
  e.reason = n.drain_reason;
  record(e);
  log(draining ? absl::StrCat("node ", node, " draining: ", reason)
               : absl::StrCat("node ", node, " takes new work again"));
  if (!draining) {
    scheduler_.retry_pending();
    retry_waiting();
  }
  return absl::OkStatus();
}

HeartbeatReply HeadService::heartbeat(uint32_t node, uint64_t seen_version) {
  HeartbeatReply reply;
  reply.head_incarnation = incarnation_;
  auto it = nodes_.find(node);
  if (it == nodes_.end() || it->second.state != NodeState::kAlive) {
    reply.known = false;
    return reply;
  }
  NodeRecord& n = it->second;
  n.last_heartbeat = absl::Now();
  n.seen_version = std::max(n.seen_version, seen_version);
  for (auto e = events_.rbegin(); e != events_.rend() && e->version > seen_version; ++e) {
    if (tells(*e, n.info.kind)) reply.events.push_back(*e);
  }
  std::reverse(reply.events.begin(), reply.events.end());
  reply.version = version_;
  reply.heartbeat_ms = absl::ToInt64Milliseconds(heartbeat_interval());
  return reply;
}

void HeadService::report_lost(uint32_t reporter, uint32_t node, std::string reason) {
  auto it = nodes_.find(node);
  if (it == nodes_.end() || it->second.state != NodeState::kAlive) return;
  declare_dead(node, absl::StrCat(reporter == kHeadNode ? std::string("the head")
                                                        : absl::StrCat("node ", reporter),
                                  " lost its connection to it: ", reason));
}

absl::Status HeadService::fence_node(uint32_t reporter, uint32_t node, std::string reason) {
  if (node == kHeadNode) {
    return absl::InvalidArgumentError("the head's own node cannot be fenced");
  }
  auto it = nodes_.find(node);
  if (it == nodes_.end()) {
    // Of an earlier start of the head, and not rejoined: it must not come
    // back (rejoin_node refuses a node recorded dead).
    if (node > kLastNode) {
      return absl::InvalidArgumentError(absl::StrCat(node, " is not a node index"));
    }
    if (absl::Status s = ids_.saw_node(node); !s.ok()) return s;
    NodeRecord& n = nodes_[node];
    n.info.index = node;
    n.info.kind = NodeKind::kWorker;
    n.state = NodeState::kDead;
    n.death_reason = absl::StrCat("fenced by node ", reporter, " (it had not rejoined): ", reason);
    log(absl::StrCat("node ", node, " is dead: ", n.death_reason));
    return absl::OkStatus();
  }
  if (it->second.state != NodeState::kAlive) return absl::OkStatus();
  declare_dead(node, absl::StrCat("fenced by node ", reporter, ": ", reason));
  return absl::OkStatus();
}

void HeadService::unregister_node(uint32_t node, std::string reason) {
  auto it = nodes_.find(node);
  if (it == nodes_.end() || it->second.state != NodeState::kAlive) return;
  if (reason.empty()) reason = "left the cluster";
  end_job(node, JobState::kFinished, reason);
  declare_dead(node, reason);
}

void HeadService::tick() {
  absl::Time now = absl::Now();
  // The clock asks every 50 ms at most. A longer gap is time the head was
  // away - stopped, or too busy to get here - and heartbeats that came
  // meanwhile wait unread: the nodes get that time back.
  absl::Duration away = now - last_tick_ - kTickPeriod;
  last_tick_ = now;
  if (away > kTickPeriod) {
    for (auto& [index, n] : nodes_)
      n.last_heartbeat = std::min(now, n.last_heartbeat + away);
    if (away > absl::Milliseconds(500)) {
      log(absl::StrCat("the head was held up for ", seconds(away),
                       "; nodes get that time back before any is declared dead"));
    }
  }
  absl::Duration budget = failure_budget();
  std::vector<uint32_t> late;
  for (const auto& [index, n] : nodes_) {
    if (n.state == NodeState::kAlive && now - n.last_heartbeat > budget) late.push_back(index);
  }
  for (uint32_t index : late) {
    declare_dead(index,
                 absl::StrCat("no heartbeat for ", seconds(now - nodes_[index].last_heartbeat),
                              " (budget ", seconds(budget), ")"));
  }
  if (now - last_trim_ > absl::Seconds(1)) {
    last_trim_ = now;
    trim_events();
  }
  if (rejoin_deadline_ != absl::Time() && now >= rejoin_deadline_) {
    rejoin_deadline_ = absl::Time();
    end_rejoin_grace();
  }
}

void HeadService::declare_dead(uint32_t node, const std::string& reason) {
  NodeRecord& n = nodes_[node];
  n.state = NodeState::kDead;
  n.death_reason = reason;
  --alive_;
  static_cast<void>(forget(node_record(node)));
  log(absl::StrCat(std::string(to_string(n.info.kind)), " ", node, " (", n.info.name,
                   ") is dead: ", reason));
  ClusterEvent died;
  died.kind = ClusterEvent::kNodeDied;
  died.node = n.info;
  died.reason = reason;
  record(died);
  node_->fail_node(node, absl::UnavailableError(reason));
  std::vector<PlacementGroupId> displaced = scheduler_.remove_node(node);
  for (PlacementGroupId g : displaced)
    log(absl::StrCat("placement group ", g.value, " lost a bundle on node ", node,
                     "; it is pending again"));
  // Its actors: restarted elsewhere if they may be, otherwise gone.
  std::string lost = absl::StrCat("its node ", node, " (", n.info.name, ") was lost: ", reason);
  for (auto& [id, actor] : actors_) {
    // (One still being placed there learns of it from its hosting call,
    // which fails now: it is placed again, see host().)
    if (actor.node != node || actor.state != ActorState::kAlive) continue;
    if (!restartable(actor)) {
      actor_gone(actor, lost);
      continue;
    }
    actor.state = ActorState::kRestarting;
    actor.death_reason = lost;
    ++actor.restarts;
    waiting_.insert(id);
  }
  // The lost bundles first (on a spare, or wherever there is room), so that
  // the actors restarted from them find them placed.
  scheduler_.retry_pending();
  retry_waiting();
  end_job(node, JobState::kFailed, absl::StrCat("its driver was lost: ", reason));
}

// --- Jobs ----------------------------------------------------------------------

uint32_t HeadService::job_of(uint32_t owner, bool detached) const {
  if (detached) return 0;
  auto it = jobs_.find(owner);
  return it != jobs_.end() && it->second.state == JobState::kRunning ? owner : 0;
}

void HeadService::end_job(uint32_t job, JobState state, const std::string& reason) {
  auto it = jobs_.find(job);
  if (it == jobs_.end() || it->second.state != JobState::kRunning) return;
  it->second.state = state;
  it->second.end_reason = reason;
  static_cast<void>(save_job(job));
  std::string why = absl::StrCat("its job ", job, " ended (", reason, ")");
  // Placement groups first: removing one removes the actors in it.
  std::vector<uint64_t> groups;
  for (const auto& [group, owner] : group_jobs_) {
    if (owner == job) groups.push_back(group);
  }
  for (uint64_t group : groups)
    static_cast<void>(remove_placement_group(group));
  int actors = 0;
  for (auto& [id, actor] : actors_) {
    if (actor.job == job && actor.state != ActorState::kDead) {
      remove_actor(actor, why);
      ++actors;
    }
  }
  std::vector<std::string> collectives;
  for (auto c = collective_jobs_.begin(); c != collective_jobs_.end();) {
    if (c->second != job) {
      ++c;
      continue;
    }
    std::string prefix = collective_group_kv_prefix(c->first);
    for (auto k = kv_.lower_bound(prefix); k != kv_.end() && k->first.starts_with(prefix);) {
      static_cast<void>(forget(kv_record(k->first)));
      k = kv_.erase(k);
    }
    collectives.push_back(c->first);
    c = collective_jobs_.erase(c);
  }
  // Ended jobs keep the history of their metrics while they are among the latest few.
  {
    size_t newer = 0;
    for (auto j = jobs_.rbegin(); j != jobs_.rend(); ++j) {
      if (j->second.state == JobState::kRunning || j->first == job) continue;
      if (++newer >= kEndedJobsWithHistory) j->second.metrics.drop_history();
    }
  }
  // Ended jobs are kept for `troupe status`, the latest few.
  size_t ended = 0;
  for (const auto& [id, record] : jobs_)
    ended += record.state == JobState::kRunning ? 0 : 1;
  for (auto j = jobs_.begin(); ended > kEndedJobsKept && j != jobs_.end();) {
    if (j->second.state != JobState::kRunning && j->first != job) {
      static_cast<void>(forget(job_record(j->first)));
      j = jobs_.erase(j);
      --ended;
    } else {
      ++j;
    }
  }
  it = jobs_.find(job);
  log(absl::StrCat("job ", job, " (", it->second.driver.name, ") ", std::string(to_string(state)),
                   ": ", reason, "; removed ", actors, " actors, ", groups.size(),
                   " placement groups, ", collectives.size(), " collective groups"));
  scheduler_.retry_pending();
  retry_waiting();
}

void HeadService::remove_actor(ActorRecord& actor, const std::string& reason) {
  if (actor.state == ActorState::kDead) return;
  // An actor being placed holds its resources until the hosting answers;
  // the answer sees it dead and gives them back.
  if (actor.state == ActorState::kAlive) scheduler_.release_actor(actor.placement, actor.resources);
  agent(actor.node).tell(&NodeAgent::kill, actor.id, false, reason);
  actor_gone(actor, reason);
}

absl::Status HeadService::claim_collective_group(std::string name, uint32_t node, uint64_t actor) {
  uint32_t job = 0;
  if (actor != 0) {
    auto a = actors_.find(actor);
    if (a != actors_.end()) job = a->second.job;
  } else {
    job = job_of(node, false);
  }
  auto it = collective_jobs_.find(name);
  if (it != collective_jobs_.end() && it->second != job) {
    auto owner = jobs_.find(it->second);
    return absl::AlreadyExistsError(
        absl::StrCat("collective group '", name, "' belongs to job ", it->second, " (",
                     owner == jobs_.end() ? "?" : owner->second.driver.name,
                     "), which is running; choose another name"));
  }
  if (job != 0) collective_jobs_[name] = job;
  return absl::OkStatus();
}

// --- Actors --------------------------------------------------------------------

Future<ActorLocation> HeadService::spawn_actor(SpawnRequest request) {
  if (stopped_->load()) {
    return Future<ActorLocation>::failed(absl::UnavailableError("the cluster is stopping"));
  }
  if (!request.name.empty()) {
    auto it = names_.find(request.name);
    if (it != names_.end() && actors_[it->second].state != ActorState::kDead) {
      return Future<ActorLocation>::failed(absl::AlreadyExistsError(absl::StrCat(
          "an actor named '", request.name, "' already exists: ", to_string(ActorId{it->second}))));
    }
  }
  absl::StatusOr<Resources> resources = Resources::parse(request.resources);
  if (!resources.ok()) return Future<ActorLocation>::failed(resources.status());
  if (absl::Status s = check_gpu_request(resources->get(kGpu)); !s.ok()) {
    return Future<ActorLocation>::failed(s);
  }
  absl::StatusOr<uint64_t> sequence = ids_.next_actor();
  if (!sequence.ok()) return Future<ActorLocation>::failed(sequence.status());
  uint64_t id = ActorId::make(kClusterActorNode, *sequence).value;
  ActorRecord& actor = actors_[id];
  actor.id = id;
  actor.job = job_of(request.owner, request.detached);
  actor.resources = *resources;
  actor.spawn = std::move(request);
  if (!actor.spawn.name.empty()) names_[actor.spawn.name] = id;
  return host(id, 0, "");
}

Future<ActorLocation> HeadService::host(uint64_t id, int32_t restart_count,
                                        std::string restart_reason) {
  ActorRecord& actor = actors_[id];
  PlacementRequest where;
  where.resources = actor.resources;
  if (actor.spawn.node >= 0) where.node = static_cast<NodeIndex>(actor.spawn.node);
  if (actor.spawn.placement_group != 0) {
    where.group = PlacementGroupId{actor.spawn.placement_group};
    where.bundle_index = actor.spawn.bundle_index;
  }
  absl::StatusOr<Placement> placed = scheduler_.place_actor(where);
  if (!placed.ok()) {
    if (restart_count == 0) {
      if (!actor.spawn.name.empty()) names_.erase(actor.spawn.name);
      actors_.erase(id);
    } else {
      waiting_.insert(id);  // no room now; tried again when nodes join or resources free up
    }
    return Future<ActorLocation>::failed(placed.status());
  }
  actor.placement = *placed;
  actor.node = placed->node;
  uint64_t attempt = ++actor.attempt;
  if (restart_count == 0) actor.state = ActorState::kPending;
  HostRequest request;
  request.id = id;
  request.spawn = actor.spawn;
  request.restart_count = restart_count;
  request.restart_reason = std::move(restart_reason);
  uint32_t node = placed->node;
  return agent(node)
      .call(&NodeAgent::host, std::move(request))
      .then([this, id, node, attempt](absl::StatusOr<uint64_t> hosted) -> Future<ActorLocation> {
        auto failed = [](absl::Status s) { return Future<ActorLocation>::failed(std::move(s)); };
        auto it = actors_.find(id);
        if (it == actors_.end() || it->second.attempt != attempt) {
          return failed(absl::AbortedError("superseded: the actor was placed again meanwhile"));
        }
        ActorRecord& a = it->second;
        if (a.state == ActorState::kDead) {  // removed meanwhile (its job ended, or killed)
          if (hosted.ok()) agent(node).tell(&NodeAgent::kill, id, false, a.death_reason);
          scheduler_.release_actor(a.placement, a.resources);
          return failed(absl::AbortedError(
              absl::StrCat(to_string(ActorId{id}), " was removed: ", a.death_reason)));
        }
        if (!hosted.ok()) {
          scheduler_.release_actor(a.placement, a.resources);
          // The head cannot reach the node, or lost it with the call in
          // flight (the node's agent died with it): as when a peer reports
          // it, the node is declared dead at once (its heartbeats may not
          // have stopped yet).
          bool unreachable = absl::IsUnavailable(hosted.status()) || IsActorDied(hosted.status());
          if (unreachable && nodes_[node].state == NodeState::kAlive) {
            declare_dead(node,
                         absl::StrCat("the head cannot reach it: ", hosted.status().message()));
          }
          // Placed on a node that was lost before the actor started there:
          // nothing of it ran, so it is placed again (not a restart).
          bool node_lost = nodes_[node].state == NodeState::kDead;
          if (a.state == ActorState::kPending && node_lost && attempt < kMaxPlacements) {
            log(absl::StrCat(to_string(ActorId{id}), " (", a.spawn.type, ") was placed on node ",
                             node, ", lost before it started; placing it again"));
            return host(id, 0, "");
          }
          if (a.restarts == 0 || a.state == ActorState::kPending) {
            actor_gone(a, std::string(hosted.status().message()));
          } else if (node_lost) {
            // The node chosen for the restart (a spare) was lost too, before
            // the actor started there. Its loss placed the bundles it held
            // again, on what is alive, but this actor was not waiting then:
            // its restart starts again now, there or wherever there is room
            // (or once a node joins). Each try that fails so takes a node
            // out of the cluster, so this ends.
            log(absl::StrCat(to_string(ActorId{id}), " (", a.spawn.type,
                             ") was being restarted on node ", node,
                             ", lost before it started there; placing it again"));
            waiting_.insert(id);
            retry_waiting();
          } else {
            waiting_.insert(id);  // try another node later
          }
          return failed(hosted.status());
        }
        bool moved = a.state == ActorState::kRestarting;
        a.state = ActorState::kAlive;
        a.node = node;
        if (moved) {
          ClusterEvent e;
          e.kind = ClusterEvent::kActorMoved;
          e.actor = id;
          e.to_node = node;
          record(e);
          node_->relocate(ActorId{id}, node);
          log(absl::StrCat(to_string(ActorId{id}), " (", a.spawn.type, ") restarted on node ", node,
                           " (restart ", a.restarts, ")"));
        }
        return once_kept(save_actor(a), ActorLocation{id, node, a.spawn.type});
      });
}

void HeadService::retry_waiting() {
  std::set<uint64_t> waiting = std::exchange(waiting_, {});
  for (uint64_t id : waiting) {
    auto it = actors_.find(id);
    if (it == actors_.end() || it->second.state != ActorState::kRestarting) continue;
    // Placed and hosted, or back in waiting_ if there is no room yet.
    static_cast<void>(host(id, it->second.restarts, it->second.death_reason));
  }
}

void HeadService::actor_gone(ActorRecord& actor, const std::string& reason) {
  if (actor.state == ActorState::kDead) return;
  actor.state = ActorState::kDead;
  actor.death_reason = reason;
  actor.awaiting_rejoin = false;
  static_cast<void>(forget(actor_record(actor.id)));
  if (!actor.spawn.name.empty()) {
    auto it = names_.find(actor.spawn.name);
    if (it != names_.end() && it->second == actor.id) names_.erase(it);
  }
  for (Promise<std::string>& w : actor.watchers)
    w.set_value(reason);
  actor.watchers.clear();
  log(absl::StrCat(to_string(ActorId{actor.id}), " (", actor.spawn.type, ") died: ", reason));
}

absl::StatusOr<ActorLocation> HeadService::get_actor(std::string name) {
  auto it = names_.find(name);
  if (it == names_.end()) {
    return absl::NotFoundError(absl::StrCat("no actor named '", name, "' in the cluster"));
  }
  const ActorRecord& a = actors_[it->second];
  return ActorLocation{a.id, a.node, a.spawn.type};
}

absl::StatusOr<std::vector<std::string>> HeadService::node_endpoints(uint32_t node) {
  auto it = nodes_.find(node);
  if (it == nodes_.end()) return absl::NotFoundError(absl::StrCat("no node ", node));
  if (it->second.state != NodeState::kAlive) {
    return absl::UnavailableError(
        absl::StrCat("node ", node, " is dead: ", it->second.death_reason));
  }
  return it->second.info.endpoints;
}

absl::StatusOr<uint32_t> HeadService::locate(uint64_t id) {
  auto it = actors_.find(id);
  if (it == actors_.end()) {
    return absl::NotFoundError(absl::StrCat(to_string(ActorId{id}), " is not known to the head"));
  }
  const ActorRecord& a = it->second;
  switch (a.state) {
    case ActorState::kAlive:
      return a.node;
    case ActorState::kDead:
      return ActorDiedError(absl::StrCat(to_string(ActorId{id}), " died: ", a.death_reason));
    default:
      return absl::UnavailableError(
          absl::StrCat(to_string(ActorId{id}), " is being restarted: ", a.death_reason));
  }
}

absl::StatusOr<int32_t> HeadService::task_retries(uint64_t id) {
  auto it = actors_.find(id);
  if (it == actors_.end()) {
    return absl::NotFoundError(absl::StrCat(to_string(ActorId{id}), " is not known to the head"));
  }
  return it->second.spawn.max_task_retries;
}

void HeadService::actor_died(uint64_t id, std::string reason) {
  auto it = actors_.find(id);
  if (it == actors_.end()) return;
  ActorRecord& a = it->second;
  if (a.state == ActorState::kDead) return;
  if (a.state == ActorState::kAlive) scheduler_.release_actor(a.placement, a.resources);
  actor_gone(a, reason);
  retry_waiting();  // its resources may be what a restart was waiting for
}

absl::Status HeadService::kill_actor(uint64_t id, bool no_restart) {
  auto it = actors_.find(id);
  if (it == actors_.end()) {
    return absl::NotFoundError(absl::StrCat(to_string(ActorId{id}), " is not known to the head"));
  }
  const ActorRecord& a = it->second;
  if (a.state == ActorState::kDead) return absl::OkStatus();
  agent(a.node).tell(&NodeAgent::kill, id, !no_restart,
                     std::string(no_restart ? "kill()" : "kill(no_restart=false)"));
  return absl::OkStatus();
}

Future<std::string> HeadService::watch_actor(uint64_t id) {
  auto it = actors_.find(id);
  if (it == actors_.end()) {
    return Future<std::string>::failed(
        absl::NotFoundError(absl::StrCat(to_string(ActorId{id}), " is not known to the head")));
  }
  if (it->second.state == ActorState::kDead) {
    return make_ready_future(it->second.death_reason);
  }
  Promise<std::string> p;
  Future<std::string> f = p.get_future();
  it->second.watchers.push_back(std::move(p));
  return f;
}

// --- Placement groups ----------------------------------------------------------

Future<uint64_t> HeadService::create_placement_group(std::vector<std::string> bundles,
                                                     std::string strategy, std::string name,
                                                     uint32_t owner, bool detached,
                                                     std::vector<int32_t> targets) {
  absl::StatusOr<PlacementStrategy> s = parse_placement_strategy(strategy);
  if (!s.ok()) return Future<uint64_t>::failed(s.status());
  std::vector<Resources> parsed;
  for (const std::string& b : bundles) {
    absl::StatusOr<Resources> r = Resources::parse(b);
    if (!r.ok()) return Future<uint64_t>::failed(r.status());
    parsed.push_back(*r);
  }
  absl::StatusOr<uint64_t> next = ids_.next_group();
  if (!next.ok()) return Future<uint64_t>::failed(next.status());
  std::vector<std::optional<NodeIndex>> soft_targets;
  for (int32_t t : targets)
    soft_targets.push_back(t >= 0 ? std::optional<NodeIndex>(static_cast<NodeIndex>(t))
                                  : std::nullopt);
  absl::StatusOr<PlacementGroupId> id = scheduler_.create_placement_group(
      std::move(parsed), *s, std::move(name), PlacementGroupId{*next}, std::move(soft_targets));
  if (!id.ok()) return Future<uint64_t>::failed(id.status());
  if (uint32_t job = job_of(owner, detached); job != 0) group_jobs_[id->value] = job;
  auto info = scheduler_.group(*id);
  log(absl::StrCat("placement group ", id->value, " (", std::string(to_string(*s)), ", ",
                   bundles.size(), " bundles) ", info && info->placed ? "placed" : "pending"));
  return once_kept(save_group(id->value), id->value);
}

absl::StatusOr<bool> HeadService::placement_group_ready(uint64_t id) {
  scheduler_.retry_pending();
  auto info = scheduler_.group(PlacementGroupId{id});
  if (!info) return absl::NotFoundError(absl::StrCat("no placement group ", id));
  if (!info->placed) {
    if (absl::Status s = scheduler_.check_feasible(PlacementGroupId{id}); !s.ok()) return s;
  }
  return info->placed;
}

absl::Status HeadService::remove_placement_group(uint64_t id) {
  // As in Ray, the actors in it go with it.
  for (auto& [actor_id, a] : actors_) {
    if (a.spawn.placement_group == id && a.state != ActorState::kDead) {
      agent(a.node).tell(&NodeAgent::kill, actor_id, false,
                         std::string("its placement group was removed"));
      actor_gone(a, "its placement group was removed");
    }
  }
  absl::Status s = scheduler_.remove_placement_group(PlacementGroupId{id});
  group_jobs_.erase(id);
  if (s.ok()) static_cast<void>(forget(group_record(id)));
  if (s.ok()) {
    log(absl::StrCat("placement group ", id, " removed"));
    scheduler_.retry_pending();
    retry_waiting();
  }
  return s;
}

// --- KV --------------------------------------------------------------------------

Future<bool> HeadService::kv_put(std::string key, std::string value, bool overwrite) {
  auto [it, inserted] = kv_.try_emplace(key, value);
  if (!inserted) {
    if (!overwrite) return make_ready_future(false);
    it->second = value;
  }
  if (!records_->keeps_records()) return make_ready_future(true);
  return once_kept(records_->put(kv_record(key), std::move(value)), true);
}

std::optional<std::string> HeadService::kv_get(std::string key) {
  auto it = kv_.find(key);
  if (it == kv_.end()) return std::nullopt;
  return it->second;
}

Future<bool> HeadService::kv_delete(std::string key) {
  if (kv_.erase(key) == 0) return make_ready_future(false);
  return once_kept(forget(kv_record(key)), true);
}

std::vector<std::string> HeadService::kv_keys(std::string prefix) {
  std::vector<std::string> keys;
  for (auto it = kv_.lower_bound(prefix); it != kv_.end() && it->first.starts_with(prefix); ++it)
    keys.push_back(it->first);
  return keys;
}

// --- Status and stop -------------------------------------------------------------

ClusterStatus HeadService::status() {
  ClusterStatus s;
  absl::Time now = absl::Now();
  s.rejoining = now - started_ < 3 * config_.heartbeat_timeout;
  std::map<uint32_t, int64_t> alive_on;
  std::map<uint32_t, int64_t> owned_by;  // a job -> its actors not dead
  for (const auto& [id, a] : actors_) {
    if (a.state == ActorState::kAlive) ++alive_on[a.node];
    if (a.job != 0 && a.state != ActorState::kDead) ++owned_by[a.job];
    ActorStatus as;
    as.id = id;
    as.type = a.spawn.type;
    as.name = a.spawn.name;
    as.node = a.node;
    as.state = a.state;
    as.restarts = a.restarts;
    as.death_reason = a.death_reason;
    as.job = a.job;
    s.actors.push_back(std::move(as));
  }
  for (const auto& [index, n] : nodes_) {
    NodeStatus ns;
    ns.info = n.info;
    ns.state = n.state;
    ns.death_reason = n.death_reason;
    ns.available = n.state == NodeState::kAlive && n.info.kind == NodeKind::kWorker
                       ? scheduler_.available(index).to_string()
                       : "";
    ns.actors = alive_on[index];
    ns.last_heartbeat_ms = absl::ToInt64Milliseconds(now - n.last_heartbeat);
    ns.ready = n.state == NodeState::kAlive && n.ready;
    ns.draining = n.state == NodeState::kAlive && n.draining;
    ns.drain_reason = n.drain_reason;
    s.nodes.push_back(std::move(ns));
  }
  for (const Scheduler::GroupInfo& g : scheduler_.groups()) {
    PlacementGroupStatus ps;
    ps.id = g.id.value;
    ps.name = g.name;
    ps.strategy = std::string(to_string(g.strategy));
    for (const Resources& b : g.bundles)
      ps.bundles.push_back(b.to_string());
    ps.placed = g.placed;
    ps.bundle_nodes.assign(g.bundle_nodes.begin(), g.bundle_nodes.end());
    auto owner = group_jobs_.find(g.id.value);
    ps.job = owner == group_jobs_.end() ? 0 : owner->second;
    s.placement_groups.push_back(std::move(ps));
  }
  for (const auto& [job, record] : jobs_) {
    JobStatus js;
    js.id = job;
    js.driver = record.driver.name;
    js.pid = record.driver.pid;
    js.state = record.state;
    js.end_reason = record.end_reason;
    js.actors = owned_by[job];
    if (auto t = kv_.find(absl::StrCat("job/", job, "/training")); t != kv_.end()) {
      js.training = t->second;
    }
    js.step = record.metrics.step();
    js.metrics = record.metrics.latest();
    js.metrics_help = record.metrics.help();
    for (const auto& [group, owner] : group_jobs_) {
      if (owner == job) js.placement_groups.push_back(group);
    }
    for (const auto& [name, owner] : collective_jobs_) {
      if (owner == job) js.collective_groups.push_back(name);
    }
    s.jobs.push_back(std::move(js));
  }
  s.events.assign(log_.begin(), log_.end());
  return s;
}

void HeadService::report_metrics(uint32_t job, MetricsReport report) {
  auto it = jobs_.find(job);
  if (it == jobs_.end()) return;  // an ended job no longer kept, or no job
  it->second.metrics.add(std::move(report));
}

absl::StatusOr<JobMetrics> HeadService::job_metrics(uint32_t job) {
  auto it = jobs_.find(job);
  if (it == jobs_.end()) {
    return absl::NotFoundError(absl::StrCat("job ", job, " is not known (or ended long ago)"));
  }
  return it->second.metrics.snapshot(job);
}

void HeadService::stop() {
  log("stop requested");
  for (const auto& [index, n] : nodes_) {
    if (n.state == NodeState::kAlive && n.info.kind == NodeKind::kWorker) {
      agent(index).tell(&NodeAgent::shutdown, std::string("the cluster was stopped"));
    }
  }
  stopped_->store(true);
}

TROUPE_ACTOR_DEFINE(HeadService);

}  // namespace troupe::cluster
