// Cluster: what a driver program uses - connect to a running cluster, spawn
// actors on it, find them by name, reserve placement groups, use the KV store.
// The Ray equivalents are noted beside each call.
//
//   auto cluster = troupe::Cluster::connect({.head = "10.0.0.1:6380"});  // ray.init(address=...)
//   auto shard = cluster->spawn<Shard>({.name = "shard-0", .max_restarts = 3,
//                                       .resources = "CPU=1"}, 0);     //
//                                       Shard.options(...).remote(0)
//   int n = *shard->call(&Shard::size).get();                           //
//   ray.get(shard.size.remote())
//
// The head address comes from ClusterOptions::head, TROUPE_HEAD, the launch
// environment (Slurm, torchrun/Kubeflow, a JobSet: core/cluster/launch_env.h)
// or the head running on this machine; the token from ClusterOptions::token,
// the token file, TROUPE_TOKEN or that head's state directory. A driver's
// main() does all of it in one call:
//
//   int main(int argc, char** argv) {
//     auto cluster = troupe::Cluster::connect(argc, argv);  // --head, --token-file, or the above
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/actor.h"
#include "core/cluster/detail/member.h"
#include "core/cluster/placement.h"
#include "core/cluster/protocol.h"

namespace troupe {

struct ClusterOptions {
  std::string head;   // "HOST:PORT"; empty: $TROUPE_HEAD
  std::string token;  // empty: read token_file, else $TROUPE_TOKEN
  std::string token_file;
  std::string name;  // shown in `troupe status`
  std::vector<std::string> transports = {"ucx", "tcp"};
  int threads = 0;
  absl::Duration timeout = absl::Seconds(30);  // for control calls (spawn, lookups)
  // How long a call to an actor that is being restarted (its node was lost)
  // waits for it to be back before it fails with Unavailable; a call to an
  // actor that is gone for good fails at once with ActorDied.
  absl::Duration restart_wait = absl::Seconds(30);
  // Found through a launch environment (Slurm, torchrun, a JobSet), the
  // cluster is starting with this driver: connect() waits up to this long for
  // the head to answer and for the launch's workers (its world size) to join.
  absl::Duration launch_wait = absl::Seconds(120);
};

class Cluster {
 public:
  static absl::StatusOr<std::unique_ptr<Cluster>> connect(ClusterOptions options = {});
  // The same, with --head HOST:PORT and --token-file PATH (or --head=...)
  // taken from the program's arguments when given there - other arguments
  // are the program's own and left alone - and the program's name as the
  // driver's name unless `options` has one.
  static absl::StatusOr<std::unique_ptr<Cluster>> connect(int argc, char** argv,
                                                          ClusterOptions options = {});

  // Spawns a T somewhere in the cluster (options.resources, placement_group,
  // bundle_index, node say where; it belongs to this driver's job unless
  // options.detached), constructed from `args` - which T's
  // library must allow with TROUPE_ACTOR_CONSTRUCTOR (the default
  // constructor is always allowed). Errors: ResourceExhausted (no node has
  // room), NotFound (type or constructor unknown on the chosen node),
  // AlreadyExists (name taken), and the constructor's own failure.
  // The arguments convert to the registered constructor's parameters as in
  // a C++ call (0.05 to a float, "text" to a std::string); arguments that
  // fit no registered constructor, or fit two equally, do not compile.
  template <RegisteredActor T, class... A>
  absl::StatusOr<ActorRef<T>> spawn(SpawnOptions options, A&&... args) {
    if constexpr (!detail::HasRemoteConstructor<T, A...>) {
      static_assert(detail::HasRemoteConstructor<T, A...>,
                    "Cluster::spawn<T>(options, args...): no constructor of T registered with "
                    "TROUPE_ACTOR_CONSTRUCTOR (or the default one TROUPE_ACTOR allows) takes "
                    "these arguments, or two fit them equally well");
      return absl::InternalError("unreachable");
    } else {
      using Signature = detail::RemoteConstructorFor<T, A...>;
      Writer w;
      w.set_actor_resolver(&member_->node().actor_resolver());
      detail::encode_constructor_args(w, Signature{}, std::forward<A>(args)...);
      absl::StatusOr<cluster::ActorLocation> where =
          spawn_actor(actor_type_of<T>().name, detail::signature_id(Signature{}), w, options);
      if (!where.ok()) return where.status();
      return member_->node().ref<T>(ActorId{where->id}, where->node);
    }
  }

  // Spawns a T in this driver's own process: not placed by the head, not
  // restarted elsewhere, gone when this Cluster is. A handle to it passed to
  // cluster actors is called back here (a replica the driver keeps, a
  // progress sink). Errors: those of ActorSystem::spawn.
  template <RegisteredActor T, class... A>
  absl::StatusOr<ActorRef<T>> spawn_local(SpawnOptions options, A&&... args) {
    return member_->node().system().spawn<T>(std::move(options), std::forward<A>(args)...);
  }

  // The live actor named `name` (ray.get_actor). NotFound if none,
  // InvalidArgument if it is not a T.
  template <RegisteredActor T>
  absl::StatusOr<ActorRef<T>> get_actor(std::string_view name) {
    absl::StatusOr<cluster::ActorLocation> where =
        cluster::find_named_actor(*member_, name, actor_type_of<T>(), timeout_);
    if (!where.ok()) return where.status();
    return member_->node().ref<T>(ActorId{where->id}, where->node);
  }

  // Placement groups (ray.util.placement_group): bundles like "CPU=1,GPU=1".
  // Created at once; pending until every bundle fits. It belongs to this
  // driver's job, and is removed with it, unless `detached`
  // (lifetime="detached"). `target_nodes` (SPREAD only; empty, or one per
  // bundle, -1 for none): the node each bundle should go to where it has
  // room (Ray's soft target node); the others spread away from them.
  absl::StatusOr<cluster::PlacementGroupId> create_placement_group(
      std::vector<std::string> bundles, cluster::PlacementStrategy strategy, std::string name = "",
      bool detached = false, std::vector<int32_t> target_nodes = {});
  // Waits until the group is placed (pg.ready()). DeadlineExceeded if not in
  // time; ResourceExhausted at once, naming the shortfall, if the cluster's
  // nodes could not hold it even were they idle.
  absl::Status wait_placement_group(cluster::PlacementGroupId id, absl::Duration timeout);
  absl::Status remove_placement_group(cluster::PlacementGroupId id);

  // Kills actor `id` wherever it runs (ray.kill): its pending and later calls
  // fail with ActorDied. With no_restart false it fails as if it had crashed
  // and is restarted if its max_restarts allows. NotFound if unknown.
  absl::Status kill(ActorId id, bool no_restart = true);

  // Declares node `node` dead on this process's word (fencing): for a
  // worker that still heartbeats but has hung - a training job's rank that
  // made no progress within its step timeout. Its actors are restarted
  // elsewhere as for any lost node, and the node, told so, stops (a worker
  // whose actors do not return then exits). NotFound for an unknown node,
  // InvalidArgument for the head's; OK for one already dead.
  absl::Status fence_node(uint32_t node, std::string reason);

  // Drains worker `node` (`troupe drain`): it takes no new actors, and
  // elastic jobs leave it at their next step boundary (docs/elasticity.md);
  // with `draining` false it takes new work again. NotFound for an unknown
  // node, FailedPrecondition for a dead one, InvalidArgument for the head or
  // a driver.
  absl::Status drain_node(uint32_t node, bool draining, std::string reason);
  // Grows with every change of the cluster's nodes this process has heard of
  // (joined, ready, draining, died), so that a driver can look at the
  // cluster's status only when it changed. Starts at 0; never goes back.
  uint64_t membership_version() const;

  // The head's KV store, for rendezvous.
  absl::StatusOr<bool> kv_put(std::string key, std::string value, bool overwrite = true);
  absl::StatusOr<std::optional<std::string>> kv_get(std::string key);

  absl::StatusOr<cluster::ClusterStatus> status();

  // What this driver's job reports of itself, sent to the head without
  // waiting (a lost report costs a point of a curve, never a step): the
  // head's /metrics shows the latest values as troupe_train_*, its dashboard
  // their history (docs/observability.md).
  void report_metrics(cluster::MetricsReport report);
  // What the head keeps of job `job`'s reports. NotFound for a job it does
  // not keep.
  absl::StatusOr<cluster::JobMetrics> job_metrics(uint32_t job);

  // While the head does not answer this process (it is down, or
  // restarting): since when (its last answer), and how long after that this
  // process gives up on the cluster - as workers do, by default as long
  // (`troupe worker --head-grace`). nullopt while the head answers.
  struct HeadAway {
    absl::Time since;
    absl::Duration grace;
  };
  std::optional<HeadAway> head_away() const;
  const std::string& head_address() const { return member_->head_address(); }
  // Stops the whole cluster: workers exit, then the head (`troupe stop`).
  absl::Status stop();

  cluster::Node& node() { return member_->node(); }
  uint32_t node_index() const { return member_->index(); }
  ActorRef<cluster::HeadService> head() const { return member_->head(); }

 private:
  explicit Cluster(std::unique_ptr<cluster::Member> member, absl::Duration timeout)
      : member_(std::move(member)), timeout_(timeout) {}

  absl::StatusOr<cluster::ActorLocation> spawn_actor(const std::string& type, uint64_t constructor,
                                                     Writer& args, const SpawnOptions& options);

  std::unique_ptr<cluster::Member> member_;
  absl::Duration timeout_;
};

// The live actor named `name`, from any code of a cluster process: a driver
// (after Cluster::connect) or an actor on a worker - ray.get_actor inside a
// task. Errors: FailedPrecondition (this process is not in a cluster),
// NotFound (no live actor has that name), InvalidArgument (it is not a T).
template <RegisteredActor T>
absl::StatusOr<ActorRef<T>> get_actor(std::string_view name,
                                      absl::Duration timeout = absl::Seconds(30)) {
  cluster::Member* member = cluster::Member::current();
  if (member == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "get_actor('", std::string(name),
        "'): this process is not in a cluster (call it in an actor on a troupe worker, or "
        "after Cluster::connect)"));
  }
  absl::StatusOr<cluster::ActorLocation> where =
      cluster::find_named_actor(*member, name, actor_type_of<T>(), timeout);
  if (!where.ok()) return where.status();
  return member->node().ref<T>(ActorId{where->id}, where->node);
}

}  // namespace troupe
