#include "core/cluster/cluster.h"

#include "absl/strings/str_cat.h"
#include "core/cluster/detail/etcd_head.h"
#include "core/cluster/launch_env.h"
#include "spdlog/spdlog.h"

namespace troupe {

using cluster::HeadService;

absl::StatusOr<std::unique_ptr<Cluster>> Cluster::connect(ClusterOptions options) {
  // Like ray.init(): the options, else the environment, else the head
  // running on this machine.
  std::optional<cluster::LaunchEnv> launched;
  absl::StatusOr<std::string> head = cluster::find_head_address(options.head, &launched);
  if (!head.ok()) return head.status();
  options.head = *head;
  if (options.token.empty()) {
    absl::StatusOr<std::string> token = cluster::find_cluster_token(options.token_file);
    if (!token.ok()) return token.status();
    options.token = *token;
  }
  const cluster::MemberOptions member_options{
      .head = options.head,
      .token = options.token,
      .kind = cluster::NodeKind::kDriver,
      .name = options.name,
      .transports = options.transports,
      .threads = options.threads,
      .timeout = std::min(options.timeout, absl::Seconds(10)),
      .restart_wait = options.restart_wait};
  // Started with the cluster, the driver may come before its head.
  const absl::Time deadline = absl::Now() + options.launch_wait;
  // Given standby heads, it may come while one takes over: it waits too.
  const bool standbys =
      options.head.find(',') != std::string::npos || cluster::is_etcd_url(options.head);
  auto member = cluster::Member::join_when_head_up(
      member_options, launched || standbys ? options.launch_wait : absl::ZeroDuration(),
      [&](const absl::Status& why) {
        spdlog::info("{}: waiting for the head at {} ({})",
                     launched ? launched->manager : std::string("driver"), options.head,
                     std::string(why.message()));
      });
  if (!member.ok()) return member.status();
  std::unique_ptr<Cluster> cluster(new Cluster(*std::move(member), options.timeout));
  // ... and before the launch's other workers: it waits for them (what it
  // places next may need every one).
  if (launched && launched->world_size > 0) {
    size_t ready = 0;
    while (absl::Now() < deadline) {
      absl::StatusOr<cluster::ClusterStatus> s = cluster->status();
      ready = 0;
      if (s.ok()) {
        for (const cluster::NodeStatus& n : s->nodes)
          ready += n.ready && n.state == cluster::NodeState::kAlive ? 1 : 0;
      }
      if (ready >= static_cast<size_t>(launched->world_size)) break;
      absl::SleepFor(absl::Milliseconds(200));
    }
    if (ready < static_cast<size_t>(launched->world_size)) {
      spdlog::warn("{}: {} of the launch's {} workers joined within {}; going on without the rest",
                   launched->manager, ready, launched->world_size,
                   absl::FormatDuration(options.launch_wait));
    }
  }
  return cluster;
}

absl::StatusOr<std::unique_ptr<Cluster>> Cluster::connect(int argc, char** argv,
                                                          ClusterOptions options) {
  auto flag = [&](std::string_view name, std::string& out) {
    const std::string eq = std::string(name) + "=";
    for (int i = 1; i < argc; ++i) {
      std::string_view arg = argv[i];
      if (arg == name && i + 1 < argc) out = argv[i + 1];
      if (arg.starts_with(eq)) out = std::string(arg.substr(eq.size()));
    }
  };
  flag("--head", options.head);
  flag("--token-file", options.token_file);
  if (options.name.empty() && argc > 0) {
    std::string_view program = argv[0];
    options.name = std::string(program.substr(program.rfind('/') + 1));
  }
  return connect(std::move(options));
}

absl::StatusOr<cluster::ActorLocation> Cluster::spawn_actor(const std::string& type,
                                                            uint64_t constructor, Writer& args,
                                                            const SpawnOptions& options) {
  if (!args.ok()) return args.status();
  if (!args.buffers().empty()) {
    return absl::InvalidArgumentError(
        "constructor arguments cannot carry Buffers (they are kept for restarts); pass them "
        "in a call instead");
  }
  cluster::SpawnRequest r;
  r.type = type;
  r.constructor = constructor;
  r.args.assign(reinterpret_cast<const char*>(args.bytes().data()), args.bytes().size());
  r.name = options.name;
  r.max_restarts = options.max_restarts;
  r.dedicated_thread = options.dedicated_thread;
  r.mailbox_capacity = options.mailbox_capacity;
  r.resources = options.resources;
  r.placement_group = options.placement_group;
  r.bundle_index = options.bundle_index;
  r.node = options.node;
  r.owner = member_->index();
  r.detached = options.detached;
  r.max_task_retries = options.max_task_retries;
  return head().call(&HeadService::spawn_actor, std::move(r)).get(timeout_);
}

absl::StatusOr<cluster::PlacementGroupId> Cluster::create_placement_group(
    std::vector<std::string> bundles, cluster::PlacementStrategy strategy, std::string name,
    bool detached, std::vector<int32_t> target_nodes) {
  auto id = head()
                .call(&HeadService::create_placement_group, std::move(bundles),
                      std::string(cluster::to_string(strategy)), std::move(name), member_->index(),
                      detached, std::move(target_nodes))
                .get(timeout_);
  if (!id.ok()) return id.status();
  return cluster::PlacementGroupId{*id};
}

absl::Status Cluster::wait_placement_group(cluster::PlacementGroupId id, absl::Duration timeout) {
  absl::Time deadline = absl::Now() + timeout;
  for (int attempt = 0;; ++attempt) {
    auto ready = head().call(&HeadService::placement_group_ready, id.value).get(timeout_);
    if (!ready.ok()) return ready.status();
    if (*ready) return absl::OkStatus();
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "placement group ", id.value, " was not placed within ", absl::FormatDuration(timeout),
          " (not enough free resources on the right nodes; see `troupe status`)"));
    }
    absl::SleepFor(absl::Milliseconds(std::min(5 << std::min(attempt, 6), 100)));
  }
}

absl::Status Cluster::remove_placement_group(cluster::PlacementGroupId id) {
  return head().call(&HeadService::remove_placement_group, id.value).get(timeout_);
}

absl::Status Cluster::kill(ActorId id, bool no_restart) {
  return head().call(&HeadService::kill_actor, id.value, no_restart).get(timeout_);
}

absl::Status Cluster::fence_node(uint32_t node, std::string reason) {
  return head()
      .call(&HeadService::fence_node, member_->index(), node, std::move(reason))
      .get(timeout_);
}

absl::Status Cluster::drain_node(uint32_t node, bool draining, std::string reason) {
  return head().call(&HeadService::drain_node, node, draining, std::move(reason)).get(timeout_);
}

uint64_t Cluster::membership_version() const {
  return member_->membership_version();
}

absl::StatusOr<bool> Cluster::kv_put(std::string key, std::string value, bool overwrite) {
  return head()
      .call(&HeadService::kv_put, std::move(key), std::move(value), overwrite)
      .get(timeout_);
}

absl::StatusOr<std::optional<std::string>> Cluster::kv_get(std::string key) {
  return head().call(&HeadService::kv_get, std::move(key)).get(timeout_);
}

absl::StatusOr<cluster::ClusterStatus> Cluster::status() {
  return head().call(&HeadService::status).get(timeout_);
}

void Cluster::report_metrics(cluster::MetricsReport report) {
  head().tell(&HeadService::report_metrics, member_->index(), std::move(report));
}

absl::StatusOr<cluster::JobMetrics> Cluster::job_metrics(uint32_t job) {
  return head().call(&HeadService::job_metrics, job).get(timeout_);
}

std::optional<Cluster::HeadAway> Cluster::head_away() const {
  std::optional<absl::Time> since = member_->head_away_since();
  if (!since) return std::nullopt;
  return HeadAway{.since = *since, .grace = member_->options().head_grace};
}

absl::Status Cluster::stop() {
  return head().call(&HeadService::stop).get(timeout_);
}

}  // namespace troupe
