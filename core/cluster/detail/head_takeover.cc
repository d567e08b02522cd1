// The head's records (head_records.h): keeping them as it decides, and
// taking over from those an earlier leader kept (a standby on etcd).
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/cluster/detail/head.h"

namespace troupe::cluster {

Future<void> HeadService::save_node(const NodeInfo& info) {
  if (!records_->keeps_records()) return make_ready_future();
  return records_->put(node_record(info.index), encode_record(info));
}

Future<void> HeadService::save_job(uint32_t job) {
  if (!records_->keeps_records()) return make_ready_future();
  const JobRecord& j = jobs_.at(job);
  return records_->put(job_record(job), encode_record(StoredJob{j.driver, j.state, j.end_reason}));
}

Future<void> HeadService::save_actor(const ActorRecord& actor) {
  if (!records_->keeps_records()) return make_ready_future();
  return records_->put(
      actor_record(actor.id),
      encode_record(StoredActor{actor.spawn, actor.job, actor.node, actor.restarts}));
}

Future<void> HeadService::save_group(uint64_t group) {
  if (!records_->keeps_records()) return make_ready_future();
  std::optional<Scheduler::GroupInfo> g = scheduler_.group(PlacementGroupId{group});
  if (!g) return make_ready_future();
  StoredGroup stored;
  for (const Resources& b : g->bundles)
    stored.bundles.push_back(b.to_string());
  stored.strategy = std::string(to_string(g->strategy));
  stored.name = g->name;
  auto owner = group_jobs_.find(group);
  stored.job = owner == group_jobs_.end() ? 0 : owner->second;
  return records_->put(group_record(group), encode_record(stored));
}

Future<void> HeadService::forget(std::string record) {
  if (!records_->keeps_records()) return make_ready_future();
  return records_->erase(std::move(record));
}

void HeadService::restore(HeadRecords restored) {
  if (restored.nodes.empty() && restored.jobs.empty() && restored.actors.empty() &&
      restored.groups.empty() && restored.kv.empty()) {
    return;
  }
  const absl::Duration grace = config_.rejoin_grace > absl::ZeroDuration()
                                   ? config_.rejoin_grace
                                   : 3 * config_.heartbeat_timeout;
  rejoin_deadline_ = absl::Now() + grace;
  expected_ = std::move(restored.nodes);
  // The ids in the records were handed out: never again (the ids' own
  // record is committed before them, but a head must not rely on that).
  for (const auto& [index, info] : expected_)
    static_cast<void>(ids_.saw_node(index));
  for (const auto& [id, stored] : restored.actors)
    static_cast<void>(ids_.saw_actor(ActorId{id}.sequence()));
  for (const auto& [group, stored] : restored.groups)
    static_cast<void>(ids_.saw_group(group));
  kv_ = std::move(restored.kv);
  for (auto& [job, stored] : restored.jobs) {
    JobRecord& j = jobs_[job];
    j.driver = std::move(stored.driver);
    j.state = stored.state;
    j.end_reason = std::move(stored.end_reason);
  }
  for (auto& [group, stored] : restored.groups) {
    std::vector<Resources> bundles;
    for (const std::string& b : stored.bundles) {
      absl::StatusOr<Resources> r = Resources::parse(b);
      bundles.push_back(r.ok() ? *r : Resources());
    }
    absl::StatusOr<PlacementStrategy> strategy = parse_placement_strategy(stored.strategy);
    absl::StatusOr<PlacementGroupId> id = scheduler_.create_placement_group(
        std::move(bundles), strategy.ok() ? *strategy : PlacementStrategy::kPack, stored.name,
        PlacementGroupId{group});
    if (!id.ok()) {
      log(absl::StrCat("placement group ", group,
                       " kept by the previous head is lost: ", id.status().message()));
      continue;
    }
    if (stored.job != 0) group_jobs_[group] = stored.job;
  }
  for (auto& [id, stored] : restored.actors) {
    ActorRecord& a = actors_[id];
    a.id = id;
    a.job = stored.job;
    a.spawn = std::move(stored.spawn);
    a.node = stored.node;
    a.restarts = stored.restarts;
    a.state = ActorState::kRestarting;
    a.awaiting_rejoin = true;
    a.death_reason = absl::StrCat("the head changed; waiting for node ", stored.node, " to rejoin");
    absl::StatusOr<Resources> r = Resources::parse(a.spawn.resources);
    a.resources = r.ok() ? *r : Resources();
    if (!a.spawn.name.empty()) names_[a.spawn.name] = id;
  }
  log(absl::StrCat("took over: ", expected_.size(), " nodes, ", jobs_.size(), " jobs, ",
                   actors_.size(), " actors, ", scheduler_.groups().size(),
                   " placement groups and ", kv_.size(), " KV keys kept; waiting up to ",
                   absl::FormatDuration(grace), " for the nodes to rejoin"));
}

void HeadService::end_rejoin_grace() {
  std::map<uint32_t, NodeInfo> missing = std::exchange(expected_, {});
  for (const auto& [index, info] : missing) {
    if (nodes_.contains(index)) continue;
    NodeRecord& n = nodes_[index];
    n.info = info;
    n.state = NodeState::kDead;
    n.death_reason = "it did not rejoin the head that took over";
    static_cast<void>(forget(node_record(index)));
    log(absl::StrCat(std::string(to_string(info.kind)), " ", index, " (", info.name,
                     ") is dead: ", n.death_reason));
    node_->fail_node(index, absl::UnavailableError(n.death_reason));
    ClusterEvent died;
    died.kind = ClusterEvent::kNodeDied;
    died.node = info;
    died.reason = n.death_reason;
    record(died);
    if (info.kind == NodeKind::kDriver) {
      end_job(index, JobState::kFailed, "its driver did not rejoin the head that took over");
    }
  }
  // The actors kept on them: restarted elsewhere if they may be.
  for (auto& [id, actor] : actors_) {
    if (!actor.awaiting_rejoin) continue;
    actor.awaiting_rejoin = false;
    std::string lost =
        absl::StrCat("its node ", actor.node, " did not rejoin the head that took over");
    if (!restartable(actor)) {
      actor_gone(actor, lost);
      continue;
    }
    actor.death_reason = lost;
    ++actor.restarts;
    waiting_.insert(id);
  }
  scheduler_.retry_pending();
  retry_waiting();
}

}  // namespace troupe::cluster
