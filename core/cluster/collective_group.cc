#include "core/cluster/collective_group.h"

#include <map>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/actor_system.h"
#include "core/cluster/detail/kv_store.h"
#include "core/cluster/detail/member.h"
#include "core/executor.h"

namespace troupe {
namespace {

// KV keys of group `name`: its latest generation, and each generation's
// members (actor ids in rank order). The communicator's own keys live under
// "collective/<name>/<generation>/".
std::string group_prefix(const std::string& name) {
  std::string prefix = cluster::collective_group_kv_prefix(name);
  prefix.pop_back();  // the trailing '/'
  return prefix;
}
std::string generation_key(const std::string& name) {
  return absl::StrCat(group_prefix(name), "/generation");
}
std::string members_key(const std::string& name, uint64_t generation) {
  return absl::StrCat(group_prefix(name), "/", generation, "/members");
}
// The node each rank of a generation runs on.
std::string node_key(const std::string& name, uint64_t generation, int rank) {
  return absl::StrCat(group_prefix(name), "/", generation, "/node_of/", rank);
}

absl::Status not_in_cluster(const std::string& what) {
  return absl::FailedPreconditionError(absl::StrCat(
      what,
      ": this process is not part of a cluster (call it in an actor on a troupe worker, or "
      "after Cluster::connect)"));
}

}  // namespace

absl::StatusOr<uint64_t> declare_collective_group(Cluster& cluster, const std::string& name,
                                                  const std::vector<ActorId>& members) {
  if (members.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("collective group '", name, "' has no members"));
  }
  std::set<ActorId> seen;
  std::vector<std::string> ids;
  for (ActorId id : members) {
    if (!seen.insert(id).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("collective group '", name, "' lists ", to_string(id), " twice"));
    }
    ids.push_back(absl::StrCat(id.value));
  }
  // The group is this driver's job's: its keys go when the job ends.
  absl::Status claimed = cluster.head()
                             .call(&cluster::HeadService::claim_collective_group, name,
                                   cluster.node_index(), uint64_t{0})
                             .get(absl::Seconds(30));
  if (!claimed.ok()) return claimed;
  absl::StatusOr<std::optional<std::string>> current = cluster.kv_get(generation_key(name));
  if (!current.ok()) return current.status();
  uint64_t generation = 0;
  if (current->has_value()) {
    if (!absl::SimpleAtoi(**current, &generation)) {
      return absl::InternalError(
          absl::StrCat("collective group '", name, "': malformed generation '", **current, "'"));
    }
    ++generation;
  }
  // Members first: whoever sees the generation finds its members there.
  for (auto [key, value] : {std::pair{members_key(name, generation), absl::StrJoin(ids, ",")},
                            std::pair{generation_key(name), absl::StrCat(generation)}}) {
    absl::StatusOr<bool> put = cluster.kv_put(key, value);
    if (!put.ok()) return put.status();
  }
  return generation;
}

absl::StatusOr<std::unique_ptr<CollectiveGroup>> CollectiveGroup::join(const std::string& name,
                                                                       absl::Duration timeout,
                                                                       int device) {
  cluster::Member* member = cluster::Member::current();
  if (member == nullptr)
    return not_in_cluster(absl::StrCat("joining collective group '", name, "'"));
  std::optional<ActorId> self = this_actor_id();
  if (!self) {
    return absl::FailedPreconditionError(absl::StrCat(
        "joining collective group '", name,
        "': join() finds the rank from the calling actor; outside an actor use init()"));
  }
  BlockingRegion region;  // rendezvous waits for the other members
  cluster::HeadKvStore kv(member->head());
  absl::StatusOr<std::string> generation_text =
      kv.wait_get(generation_key(name), absl::ZeroDuration());
  uint64_t generation = 0;
  if (!generation_text.ok() || !absl::SimpleAtoi(*generation_text, &generation)) {
    return absl::NotFoundError(absl::StrCat("no collective group '", name, "' has been declared"));
  }
  absl::StatusOr<std::string> members = kv.wait_get(members_key(name, generation), timeout);
  if (!members.ok()) return members.status();
  std::vector<std::string> ids = absl::StrSplit(*members, ',');
  for (size_t rank = 0; rank < ids.size(); ++rank) {
    if (ids[rank] == absl::StrCat(self->value)) {
      return init({.name = name,
                   .world_size = static_cast<int>(ids.size()),
                   .rank = static_cast<int>(rank),
                   .generation = generation,
                   .timeout = timeout,
                   .device = device});
    }
  }
  return absl::NotFoundError(absl::StrCat(to_string(*self), " is not a member of generation ",
                                          generation, " of collective group '", name, "'"));
}

absl::StatusOr<std::unique_ptr<CollectiveGroup>> CollectiveGroup::init(
    CollectiveGroupOptions options) {
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", options.rank, " of a world of ",
                                                   options.world_size, " in collective group '",
                                                   options.name, "'"));
  }
  cluster::Member* member = cluster::Member::current();
  if (member == nullptr) {
    return not_in_cluster(absl::StrCat("forming collective group '", options.name, "'"));
  }
  BlockingRegion region;  // rendezvous waits for the other members
  // The group belongs to the job of the driver or actor forming it.
  std::optional<ActorId> self = this_actor_id();
  absl::Status claimed = member->head()
                             .call(&cluster::HeadService::claim_collective_group, options.name,
                                   member->index(), self ? self->value : uint64_t{0})
                             .get(options.timeout);
  if (!claimed.ok()) return claimed;
  const cluster::MemberOptions& mo = member->options();
  std::unique_ptr<CollectiveGroup> g(new CollectiveGroup());
  g->name_ = options.name;
  g->store_ = std::make_unique<cluster::HeadKvStore>(member->head());
  // The members' devices first: a member that cannot use its device fails
  // here, and the others with it, before anyone waits for the host group.
  absl::StatusOr<transport::DeviceAgreement> devices =
      transport::RoutedGroup::agree(*g->store_, {.group = group_prefix(options.name),
                                                 .generation = options.generation,
                                                 .rank = options.rank,
                                                 .size = options.world_size,
                                                 .device = options.device,
                                                 .backend = options.device_backend,
                                                 .timeout = options.timeout});
  if (!devices.ok()) return devices.status();
  std::vector<std::string> kinds =
      options.transport.empty() ? mo.transports : std::vector<std::string>{options.transport};
  absl::Status last = absl::NotFoundError("no transport to try");
  std::string kind;
  for (const std::string& k : kinds) {
    auto t = transport::make_transport(
        k, {.token = mo.token,
            .local_name = absl::StrCat("collective ", options.name, " rank ", options.rank),
            .host = mo.host});
    if (t.ok()) {
      g->transport_ = *std::move(t);
      kind = k;
      break;
    }
    last = t.status();
  }
  if (!g->transport_) return last;
  // Where this rank runs, for the others to watch (before the rendezvous:
  // once it is done, every rank's is there).
  if (absl::Status s = g->store_->set(node_key(options.name, options.generation, options.rank),
                                      absl::StrCat(member->index()));
      !s.ok()) {
    return s;
  }
  auto group = transport::Group::create(*g->transport_, *g->store_,
                                        {.rank = options.rank,
                                         .size = options.world_size,
                                         .group = group_prefix(options.name),
                                         .generation = options.generation,
                                         .listen_address = absl::StrCat(kind, "://", mo.host, ":0"),
                                         .host = mo.host,
                                         .timeout = options.timeout});
  if (!group.ok()) return group.status();
  auto routed = transport::RoutedGroup::create(*std::move(group), *g->store_, *devices);
  if (!routed.ok()) return routed.status();
  g->group_ = *std::move(routed);
  g->listeners_ = member->node_death_listeners();
  if (absl::Status s = g->watch_member_nodes(options, member->index()); !s.ok()) return s;
  return g;
}

absl::Status CollectiveGroup::watch_member_nodes(const CollectiveGroupOptions& options,
                                                 uint32_t self_node) {
  std::map<uint32_t, std::vector<int>> ranks_on;  // a node -> its ranks
  for (int r = 0; r < options.world_size; ++r) {
    absl::StatusOr<std::string> text =
        store_->wait_get(node_key(options.name, options.generation, r), options.timeout);
    uint32_t node = 0;
    if (!text.ok()) return text.status();
    if (!absl::SimpleAtoi(*text, &node)) {
      return absl::InternalError(absl::StrCat("collective group '", options.name, "': rank ", r,
                                              " published a malformed node '", *text, "'"));
    }
    if (node != self_node) ranks_on[node].push_back(r);
  }
  transport::RoutedGroup* group = group_.get();
  std::string name = options.name;
  listener_ =
      listeners_->add([group, ranks_on, name, self_node](uint32_t node, const std::string& reason) {
        if (node == self_node) {  // every peer has given up on us: drop them all
          std::vector<int> others;
          for (const auto& [n, ranks] : ranks_on)
            others.insert(others.end(), ranks.begin(), ranks.end());
          group->abort(absl::AbortedError(absl::StrCat("collective group '", name,
                                                       "': this node was declared dead: ", reason)),
                       others);
          return;
        }
        auto it = ranks_on.find(node);
        if (it == ranks_on.end()) return;
        group->abort(absl::AbortedError(absl::StrCat("collective group '", name, "': rank ",
                                                     it->second.front(), "'s node ", node,
                                                     " was declared dead by the head: ", reason)),
                     it->second);
      });
  return absl::OkStatus();
}

CollectiveGroup::~CollectiveGroup() {
  if (listeners_ != nullptr) listeners_->remove(listener_);
}

absl::Status CollectiveGroup::wait(const Work& work) {
  if (work.done()) return work.wait();
  BlockingRegion region;
  return work.wait();
}

}  // namespace troupe
