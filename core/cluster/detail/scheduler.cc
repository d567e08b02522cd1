#include "core/cluster/detail/scheduler.h"

#include <algorithm>
#include <array>
#include <tuple>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace troupe::cluster {
namespace {

// Free resources per node while a group's bundles are being assigned.
using FreePool = std::map<NodeIndex, Resources>;
// The node of each bundle, by bundle index.
using Assignment = std::vector<NodeIndex>;

Resources sum(const std::vector<Resources>& bundles) {
  Resources all;
  for (const Resources& b : bundles)
    all += b;
  return all;
}

double cpu_left_after(const Resources& free, const Resources& request) {
  return free.get(kCpu) - request.get(kCpu);
}

// What a node's RDMA NICs offer a group spread over nodes, whose members talk
// across them: its RDMA ports (the node inventory's), 0 without.
double rdma_of(const Resources& pool) {
  return pool.get(kRdma);
}

// Lowers each amount of `r` to at most the same amount in `cap`.
void cap_at(Resources& r, const Resources& cap) {
  const Resources uncapped = r;
  for (const auto& [name, amount] : uncapped.amounts()) {
    r.set(name, std::min(amount, cap.get(name)));
  }
}

// STRICT_PACK: the node that holds the whole group with the least CPU left
// over (best fit, keeping roomier nodes for bigger groups); ties to the lowest.
std::optional<Assignment> assign_one_node(const std::vector<Resources>& bundles,
                                          const FreePool& free) {
  Resources all = sum(bundles);
  std::optional<NodeIndex> best;
  double best_left = 0;
  for (const auto& [node, pool] : free) {
    if (!pool.contains(all)) continue;
    double left = cpu_left_after(pool, all);
    if (!best || left < best_left) {
      best = node;
      best_left = left;
    }
  }
  if (!best) return std::nullopt;
  return Assignment(bundles.size(), *best);
}

// STRICT_SPREAD: a matching of bundles to distinct nodes (Kuhn's augmenting
// paths), so a bundle that fits few nodes is not crowded out by one that fits
// many. Exact: fails only when no such matching exists. Each bundle tries
// nodes with RDMA first (the most ports), then the most CPU left, then the
// lowest index.
class DistinctNodeMatcher {
 public:
  DistinctNodeMatcher(const std::vector<Resources>& bundles, const FreePool& free)
      : fits_(bundles.size()), match_(bundles.size()) {
    for (size_t b = 0; b < bundles.size(); ++b) {
      std::vector<std::tuple<double, double, NodeIndex>> ranked;
      for (const auto& [node, pool] : free) {
        if (pool.contains(bundles[b])) {
          ranked.emplace_back(-rdma_of(pool), -cpu_left_after(pool, bundles[b]), node);
        }
      }
      std::sort(ranked.begin(), ranked.end());
      for (const auto& entry : ranked)
        fits_[b].push_back(std::get<2>(entry));
    }
  }

  std::optional<Assignment> run() {
    for (size_t b = 0; b < fits_.size(); ++b) {
      std::set<NodeIndex> visited;
      if (!augment(b, visited)) return std::nullopt;
    }
    return match_;
  }

 private:
  // Recursion depth is at most the number of bundles: each level visits a new node.
  bool augment(size_t b, std::set<NodeIndex>& visited) {
    for (NodeIndex node : fits_[b]) {
      if (!visited.insert(node).second) continue;
      auto owner = owner_.find(node);
      if (owner == owner_.end() || augment(owner->second, visited)) {
        owner_[node] = b;
        match_[b] = node;
        return true;
      }
    }
    return false;
  }

  std::vector<std::vector<NodeIndex>> fits_;  // per bundle, nodes it fits, preferred first
  std::map<NodeIndex, size_t> owner_;         // node -> bundle matched to it
  Assignment match_;
};

std::optional<Assignment> assign_distinct_nodes(const std::vector<Resources>& bundles,
                                                const FreePool& free) {
  if (bundles.size() > free.size()) return std::nullopt;
  return DistinctNodeMatcher(bundles, free).run();
}

// PACK and SPREAD when the one-node / distinct-node attempt failed: a
// depth-first search over bundles, largest first, trying nodes in the
// strategy's order of preference. Its first descent is the greedy answer;
// backtracking finds an assignment greedy misses, within kStepBudget steps.
class BundleSearch {
 public:
  static constexpr int kStepBudget = 4096;

  BundleSearch(const std::vector<Resources>& bundles, PlacementStrategy strategy, FreePool free)
      : bundles_(bundles), strategy_(strategy), free_(std::move(free)) {}

  std::optional<Assignment> run() {
    if (!fits_in_aggregate()) return std::nullopt;
    order_largest_first();
    assignment_.assign(bundles_.size(), 0);
    if (!place_from(0)) return std::nullopt;
    return assignment_;
  }

 private:
  // Cheap necessary conditions, so a hopeless group does not spend the budget.
  bool fits_in_aggregate() const {
    Resources all_free;
    for (const auto& entry : free_)
      all_free += entry.second;
    if (!all_free.contains(sum(bundles_))) return false;
    return std::all_of(bundles_.begin(), bundles_.end(), [&](const Resources& b) {
      return std::any_of(free_.begin(), free_.end(),
                         [&](const auto& entry) { return entry.second.contains(b); });
    });
  }

  // Orders bundles by their dominant share of the free pool, largest first.
  void order_largest_first() {
    Resources all_free;
    for (const auto& entry : free_)
      all_free += entry.second;
    std::vector<double> share(bundles_.size(), 0.0);
    for (size_t b = 0; b < bundles_.size(); ++b) {
      for (const auto& [name, amount] : bundles_[b].amounts()) {
        double pool = all_free.get(name);
        if (pool > 0) share[b] = std::max(share[b], amount / pool);
      }
      order_.push_back(b);
    }
    std::stable_sort(order_.begin(), order_.end(),
                     [&](size_t x, size_t y) { return share[x] > share[y]; });
  }

  // Nodes with room for `bundle`, preferred first. PACK: nodes the group
  // already uses (best fit), then the roomiest new node, with RDMA first.
  // SPREAD: nodes with the fewest of the group's bundles, then those with
  // RDMA, then the roomiest. Ties: lowest index.
  std::vector<NodeIndex> candidates(const Resources& bundle) const {
    std::vector<std::tuple<int, double, double, NodeIndex>> ranked;
    for (const auto& [node, pool] : free_) {
      if (!pool.contains(bundle)) continue;
      int used = count_.count(node) ? count_.at(node) : 0;
      double left = cpu_left_after(pool, bundle);
      if (strategy_ == PlacementStrategy::kPack) {
        ranked.emplace_back(used > 0 ? 0 : 1, used > 0 ? 0 : -rdma_of(pool),
                            used > 0 ? left : -left, node);
      } else {
        ranked.emplace_back(used, -rdma_of(pool), -left, node);
      }
    }
    std::sort(ranked.begin(), ranked.end());
    std::vector<NodeIndex> nodes;
    for (const auto& entry : ranked)
      nodes.push_back(std::get<3>(entry));
    return nodes;
  }

  // Recursion depth is the number of bundles; total calls are bounded by the budget.
  bool place_from(size_t k) {
    if (k == order_.size()) return true;
    if (steps_left_-- <= 0) return false;
    size_t b = order_[k];
    for (NodeIndex node : candidates(bundles_[b])) {
      free_[node] -= bundles_[b];
      ++count_[node];
      assignment_[b] = node;
      if (place_from(k + 1)) return true;
      free_[node] += bundles_[b];
      --count_[node];
      if (steps_left_ <= 0) return false;
    }
    return false;
  }

  const std::vector<Resources>& bundles_;
  PlacementStrategy strategy_;
  FreePool free_;
  std::vector<size_t> order_;
  std::map<NodeIndex, int> count_;  // the group's bundles on each node so far
  Assignment assignment_;
  int steps_left_ = kStepBudget;
};

// The node of each bundle if the whole group fits `free` now; nullopt if not.
std::optional<Assignment> assign_bundles(const std::vector<Resources>& bundles,
                                         PlacementStrategy strategy, const FreePool& free) {
  switch (strategy) {
    case PlacementStrategy::kStrictPack:
      return assign_one_node(bundles, free);
    case PlacementStrategy::kStrictSpread:
      return assign_distinct_nodes(bundles, free);
    case PlacementStrategy::kPack:
      if (auto one = assign_one_node(bundles, free)) return one;
      return BundleSearch(bundles, strategy, free).run();
    case PlacementStrategy::kSpread:
      if (auto distinct = assign_distinct_nodes(bundles, free)) return distinct;
      return BundleSearch(bundles, strategy, free).run();
  }
  return std::nullopt;
}

std::string describe(const Resources& r) {
  return r.empty() ? std::string("nothing") : absl::StrCat("{", r.to_string(), "}");
}

std::string describe_group(const Scheduler::GroupInfo& info) {
  if (info.name.empty()) return to_string(info.id);
  return absl::StrCat(to_string(info.id), " ('", info.name, "')");
}

// SPREAD with soft targets: each targeted bundle on its node where it fits,
// the others spread away from those nodes first, then anywhere.
std::optional<Assignment> assign_targeted(const std::vector<Resources>& bundles,
                                          const std::vector<std::optional<NodeIndex>>& targets,
                                          FreePool free) {
  Assignment assignment(bundles.size());
  std::vector<size_t> rest;
  std::set<NodeIndex> targeted;
  for (size_t b = 0; b < bundles.size(); ++b) {
    // (A node targeted twice takes the first: SPREAD puts the rest elsewhere.)
    auto it = targets[b] && !targeted.contains(*targets[b]) ? free.find(*targets[b]) : free.end();
    if (it == free.end() || !it->second.contains(bundles[b])) {
      rest.push_back(b);
      continue;
    }
    it->second -= bundles[b];
    assignment[b] = it->first;
    targeted.insert(it->first);
  }
  if (rest.empty()) return assignment;
  std::vector<Resources> others;
  for (size_t b : rest)
    others.push_back(bundles[b]);
  FreePool away;
  for (const auto& [node, pool] : free) {
    if (!targeted.contains(node)) away.emplace(node, pool);
  }
  std::optional<Assignment> placed = assign_distinct_nodes(others, away);
  if (!placed) placed = assign_bundles(others, PlacementStrategy::kSpread, free);
  if (!placed) return std::nullopt;
  for (size_t i = 0; i < rest.size(); ++i)
    assignment[rest[i]] = (*placed)[i];
  return assignment;
}

}  // namespace

// --- Nodes -----------------------------------------------------------------

void Scheduler::add_node(NodeIndex node, Resources total) {
  auto [it, inserted] = nodes_.try_emplace(node);
  NodeState& state = it->second;
  if (inserted) {
    state.available = total;
    state.epoch = next_epoch_++;
  } else {
    Resources in_use = state.total - state.available;
    state.available = total - in_use;
  }
  state.total = std::move(total);
}

std::vector<PlacementGroupId> Scheduler::remove_node(NodeIndex node) {
  if (nodes_.erase(node) == 0) return {};
  std::vector<PlacementGroupId> affected;
  for (auto& [id, group] : groups_) {
    GroupInfo& info = group.info;
    bool hit = false;
    for (size_t b = 0; b < info.bundle_nodes.size(); ++b) {
      if (info.bundle_nodes[b] != node || info.lost[b]) continue;
      hit = true;
      info.lost[b] = true;  // its reservation went with the node
      info.bundle_available[b] = Resources();
      group.bundle_epochs[b] = 0;
    }
    if (!hit) continue;
    info.placed = false;
    if (std::all_of(info.lost.begin(), info.lost.end(), [](bool l) { return l; })) unplace(group);
    affected.push_back(id);
  }
  return affected;
}

void Scheduler::set_draining(NodeIndex node, bool draining) {
  auto it = nodes_.find(node);
  if (it != nodes_.end()) it->second.draining = draining;
}

bool Scheduler::draining(NodeIndex node) const {
  auto it = nodes_.find(node);
  return it != nodes_.end() && it->second.draining;
}

std::map<NodeIndex, Resources> Scheduler::schedulable() const {
  FreePool free;
  for (const auto& [index, state] : nodes_) {
    if (!state.draining) free.emplace(index, state.available);
  }
  return free;
}

std::vector<NodeIndex> Scheduler::nodes() const {
  std::vector<NodeIndex> out;
  for (const auto& entry : nodes_)
    out.push_back(entry.first);
  return out;
}

Resources Scheduler::total(NodeIndex node) const {
  auto it = nodes_.find(node);
  return it == nodes_.end() ? Resources() : it->second.total;
}

Resources Scheduler::available(NodeIndex node) const {
  auto it = nodes_.find(node);
  return it == nodes_.end() ? Resources() : it->second.available;
}

// --- Actors ----------------------------------------------------------------

absl::StatusOr<Placement> Scheduler::place_actor(const PlacementRequest& request,
                                                 const std::set<NodeIndex>& excluded) {
  if (request.resources.any_negative()) {
    return absl::InvalidArgumentError(
        absl::StrCat("actor request {", request.resources.to_string(), "} has a negative amount"));
  }
  if (request.node && nodes_.count(*request.node) == 0) {
    return absl::NotFoundError(
        absl::StrCat("actor pinned to node ", *request.node, ", which is not in the cluster"));
  }
  if (request.node && excluded.count(*request.node) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("actor pinned to node ", *request.node,
                                                   ", which is excluded from hosting actors"));
  }
  return request.group ? place_in_group(request, excluded) : place_ungrouped(request, excluded);
}

absl::StatusOr<Placement> Scheduler::place_ungrouped(const PlacementRequest& request,
                                                     const std::set<NodeIndex>& excluded) {
  std::optional<NodeIndex> best;
  double best_left = 0;
  for (const auto& [index, state] : nodes_) {
    if (excluded.count(index) != 0 || (request.node && *request.node != index)) continue;
    if (state.draining && !request.node) continue;
    if (!state.available.contains(request.resources)) continue;
    double left = cpu_left_after(state.available, request.resources);
    if (!best || left > best_left) {
      best = index;
      best_left = left;
    }
  }
  if (!best) return exhausted_error(request.resources, excluded, request.node);
  NodeState& state = nodes_.at(*best);
  state.available -= request.resources;
  return Placement{.node = *best, .group = std::nullopt, .bundle_index = -1, .epoch = state.epoch};
}

absl::Status Scheduler::exhausted_error(const Resources& request,
                                        const std::set<NodeIndex>& excluded,
                                        std::optional<NodeIndex> pinned) const {
  std::vector<std::string> largest;
  bool could_ever_fit = false;
  size_t eligible = 0;
  size_t drained = 0;
  // (A draining node takes no new actors unless they are pinned there.)
  auto skipped = [&](NodeIndex index, const NodeState& state) {
    return excluded.count(index) != 0 || (pinned && *pinned != index) ||
           (state.draining && !pinned);
  };
  for (const auto& [name, amount] : request.amounts()) {
    std::optional<NodeIndex> at;
    double most = 0;
    for (const auto& [index, state] : nodes_) {
      if (skipped(index, state)) continue;
      double free = state.available.get(name);
      if (!at || free > most) {
        at = index;
        most = free;
      }
    }
    Resources one;
    one.set(name, most);
    largest.push_back(at ? absl::StrCat(one.to_string(), " (node ", *at, ")") : one.to_string());
  }
  for (const auto& [index, state] : nodes_) {
    if (skipped(index, state)) {
      if (state.draining && excluded.count(index) == 0 && !pinned) ++drained;
      continue;
    }
    ++eligible;
    could_ever_fit = could_ever_fit || state.total.contains(request);
  }
  std::string where =
      pinned ? absl::StrCat("pinned node ", *pinned)
             : absl::StrCat("any of ", eligible, " eligible nodes (", excluded.size(), " excluded",
                            drained > 0 ? absl::StrCat(", ", drained, " draining") : "", ")");
  std::string hint = could_ever_fit ? "release actors or add a node"
                                    : "no eligible node has that much in total; add a bigger node";
  return absl::ResourceExhaustedError(absl::StrCat(
      "no room for an actor needing ", describe(request), " on ", where, "; largest free amounts: ",
      largest.empty() ? "-" : absl::StrJoin(largest, ", "), "; ", hint));
}

absl::StatusOr<Placement> Scheduler::place_in_group(const PlacementRequest& request,
                                                    const std::set<NodeIndex>& excluded) {
  auto it = groups_.find(*request.group);
  if (it == groups_.end()) {
    return absl::NotFoundError(
        absl::StrCat("placement group ", to_string(*request.group), " does not exist (removed?)"));
  }
  GroupState& group = it->second;
  GroupInfo& info = group.info;
  const Resources& need = request.resources;
  if (!info.placed) {
    return absl::UnavailableError(absl::StrCat("placement group ", describe_group(info),
                                               " is pending; retry once it is placed"));
  }
  const int count = static_cast<int>(info.bundles.size());
  if (request.bundle_index < -1 || request.bundle_index >= count) {
    return absl::InvalidArgumentError(
        absl::StrCat("bundle index ", request.bundle_index, " is out of range for ",
                     describe_group(info), ", which has ", count, " bundles (-1 means any)"));
  }
  auto eligible = [&](int b) {
    NodeIndex node = info.bundle_nodes[b];
    return excluded.count(node) == 0 && (!request.node || *request.node == node);
  };
  auto take = [&](int b) {
    info.bundle_available[b] -= need;
    return Placement{.node = info.bundle_nodes[b],
                     .group = info.id,
                     .bundle_index = b,
                     .epoch = group.bundle_epochs[b]};
  };
  const int first = request.bundle_index < 0 ? 0 : request.bundle_index;
  const int last = request.bundle_index < 0 ? count - 1 : request.bundle_index;
  bool any_eligible = false;
  bool any_big_enough = false;
  std::vector<std::string> left;
  for (int b = first; b <= last; ++b) {
    if (!eligible(b)) continue;
    any_eligible = true;
    any_big_enough = any_big_enough || info.bundles[b].contains(need);
    if (info.bundle_available[b].contains(need)) return take(b);
    left.push_back(absl::StrCat("bundle ", b, " on node ", info.bundle_nodes[b], " has ",
                                describe(info.bundle_available[b]), " of ",
                                describe(info.bundles[b])));
  }
  std::string which = request.bundle_index < 0 ? std::string("any bundle")
                                               : absl::StrCat("bundle ", request.bundle_index);
  if (!any_eligible) {
    return absl::InvalidArgumentError(absl::StrCat(
        which, " of ", describe_group(info), " is on an excluded node or not on the pinned node"));
  }
  if (!any_big_enough) {
    return absl::InvalidArgumentError(absl::StrCat("an actor needing ", describe(need),
                                                   " is bigger than ", which, " of ",
                                                   describe_group(info)));
  }
  return absl::ResourceExhaustedError(absl::StrCat(
      "no room in ", which, " of ", describe_group(info), " for an actor needing ", describe(need),
      ": ", absl::StrJoin(left, "; "), "; release actors in the group"));
}

void Scheduler::release_actor(const Placement& where, const Resources& resources) {
  if (where.group) {
    auto it = groups_.find(*where.group);
    if (it == groups_.end()) return;
    GroupState& group = it->second;
    GroupInfo& info = group.info;
    const int b = where.bundle_index;
    if (!group.holds() || b < 0 || b >= static_cast<int>(info.bundles.size()) || info.lost[b] ||
        (where.epoch != 0 && where.epoch != group.bundle_epochs[b])) {
      return;
    }
    Resources& left = info.bundle_available[where.bundle_index];
    left += resources;
    cap_at(left, info.bundles[where.bundle_index]);
    return;
  }
  auto it = nodes_.find(where.node);
  if (it == nodes_.end()) return;
  NodeState& state = it->second;
  if (where.epoch != 0 && where.epoch != state.epoch) return;
  state.available += resources;
  cap_at(state.available, state.total - state.reserved);
}

// --- Placement groups ------------------------------------------------------

absl::StatusOr<PlacementGroupId> Scheduler::create_placement_group(
    std::vector<Resources> bundles, PlacementStrategy strategy, std::string name,
    std::optional<PlacementGroupId> id, std::vector<std::optional<NodeIndex>> targets) {
  std::string label =
      name.empty() ? std::string("placement group") : absl::StrCat("placement group '", name, "'");
  if (bundles.empty()) return absl::InvalidArgumentError(absl::StrCat(label, " has no bundles"));
  for (size_t b = 0; b < bundles.size(); ++b) {
    if (bundles[b].any_negative()) {
      return absl::InvalidArgumentError(absl::StrCat(
          label, ": bundle ", b, " {", bundles[b].to_string(), "} has a negative amount"));
    }
    if (bundles[b].empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          label, ": bundle ", b, " is empty; a bundle must reserve something, e.g. CPU=1"));
    }
  }
  if (!targets.empty() &&
      (strategy != PlacementStrategy::kSpread || targets.size() != bundles.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        label, ": target nodes are for SPREAD groups, one per bundle (", targets.size(),
        " targets for ", bundles.size(), " bundles, ", std::string(to_string(strategy)), ")"));
  }
  if (!name.empty()) {
    if (std::optional<PlacementGroupId> existing = group_by_name(name)) {
      return absl::AlreadyExistsError(absl::StrCat(label, " already exists as ",
                                                   to_string(*existing),
                                                   "; remove it or choose another name"));
    }
  }
  if (!id) id = PlacementGroupId{next_group_id_};
  if (groups_.contains(*id)) {
    return absl::AlreadyExistsError(absl::StrCat(label, ": ", to_string(*id), " already exists"));
  }
  next_group_id_ = std::max(next_group_id_, id->value + 1);
  GroupState& group = groups_[*id];
  group.info.id = *id;
  group.info.name = std::move(name);
  group.info.strategy = strategy;
  group.info.bundles = std::move(bundles);
  group.info.targets = std::move(targets);
  try_place(group);
  return *id;
}

absl::Status Scheduler::remove_placement_group(PlacementGroupId id) {
  auto it = groups_.find(id);
  if (it == groups_.end()) {
    return absl::NotFoundError(
        absl::StrCat("placement group ", to_string(id), " does not exist (removed already?)"));
  }
  unplace(it->second);
  groups_.erase(it);
  return absl::OkStatus();
}

std::vector<PlacementGroupId> Scheduler::retry_pending() {
  std::vector<PlacementGroupId> placed;
  for (auto& [id, group] : groups_) {
    if (!group.info.placed && try_place(group)) placed.push_back(id);
  }
  return placed;
}

bool Scheduler::try_place(GroupState& group) {
  GroupInfo& info = group.info;
  if (info.placed) return true;
  const size_t n = info.bundles.size();
  if (!group.holds()) {
    std::optional<Assignment> assignment =
        info.targets.empty() ? assign_bundles(info.bundles, info.strategy, schedulable())
                             : assign_targeted(info.bundles, info.targets, schedulable());
    if (!assignment) return false;
    info.bundle_nodes = std::move(*assignment);
    info.bundle_available = info.bundles;
    info.lost.assign(n, true);  // each is reserved below
    group.bundle_epochs.assign(n, 0);
  } else {
    std::optional<std::vector<NodeIndex>> nodes = assign_lost(group);
    if (!nodes) return false;
    size_t next = 0;
    for (size_t b = 0; b < n; ++b) {
      if (info.lost[b]) info.bundle_nodes[b] = (*nodes)[next++];
    }
  }
  for (size_t b = 0; b < n; ++b) {
    if (!info.lost[b]) continue;
    NodeState& node = nodes_.at(info.bundle_nodes[b]);
    node.available -= info.bundles[b];
    node.reserved += info.bundles[b];
    info.bundle_available[b] = info.bundles[b];
    info.lost[b] = false;
    group.bundle_epochs[b] = next_epoch_++;
  }
  info.placed = true;
  return true;
}

std::optional<std::vector<NodeIndex>> Scheduler::assign_lost(const GroupState& group) const {
  const GroupInfo& info = group.info;
  std::vector<Resources> lost;
  std::set<NodeIndex> kept;  // the nodes of the bundles that stayed
  for (size_t b = 0; b < info.bundles.size(); ++b) {
    if (info.lost[b]) {
      lost.push_back(info.bundles[b]);
    } else {
      kept.insert(info.bundle_nodes[b]);
    }
  }
  FreePool all = schedulable(), on_kept, away;
  for (const auto& [index, free] : all)
    (kept.count(index) != 0 ? on_kept : away).emplace(index, free);
  switch (info.strategy) {
    case PlacementStrategy::kStrictPack:
      return assign_one_node(lost, on_kept);
    case PlacementStrategy::kStrictSpread:
      return assign_distinct_nodes(lost, away);
    case PlacementStrategy::kPack:
      if (auto one = assign_one_node(lost, on_kept)) return one;
      if (auto one = assign_one_node(lost, all)) return one;
      return BundleSearch(lost, info.strategy, all).run();
    case PlacementStrategy::kSpread:
      if (auto distinct = assign_distinct_nodes(lost, away)) return distinct;
      if (auto distinct = assign_distinct_nodes(lost, all)) return distinct;
      return BundleSearch(lost, info.strategy, all).run();
  }
  return std::nullopt;
}

absl::Status Scheduler::check_feasible(PlacementGroupId id) const {
  auto it = groups_.find(id);
  if (it == groups_.end()) return absl::NotFoundError(absl::StrCat("no ", to_string(id)));
  const GroupInfo& info = it->second.info;
  if (info.placed) return absl::OkStatus();
  FreePool idle;
  Resources total;
  for (const auto& [index, state] : nodes_) {
    idle.emplace(index, state.total);
    total += state.total;
  }
  if (assign_bundles(info.bundles, info.strategy, idle)) return absl::OkStatus();
  Resources needed;
  for (const Resources& b : info.bundles)
    needed += b;
  std::string label = info.name.empty() ? to_string(id) : absl::StrCat("'", info.name, "'");
  return absl::ResourceExhaustedError(absl::StrCat(
      "placement group ", label, " can never be placed on this cluster: its ", info.bundles.size(),
      " bundles (", std::string(to_string(info.strategy)), ") need {", needed.to_string(),
      "} in all; the ", nodes_.size(), " worker node", nodes_.size() == 1 ? "" : "s", " have {",
      total.to_string(), "} in all. Add nodes, or ask for less"));
}

void Scheduler::unplace(GroupState& group) {
  GroupInfo& info = group.info;
  for (size_t b = 0; b < info.bundle_nodes.size(); ++b) {
    if (info.lost[b]) continue;  // its reservation went with its node
    auto node = nodes_.find(info.bundle_nodes[b]);
    if (node == nodes_.end()) continue;
    node->second.available += info.bundles[b];
    node->second.reserved -= info.bundles[b];
  }
  info.placed = false;
  info.bundle_nodes.clear();
  info.bundle_available.clear();
  info.lost.clear();
  group.bundle_epochs.clear();
}

std::optional<Scheduler::GroupInfo> Scheduler::group(PlacementGroupId id) const {
  auto it = groups_.find(id);
  if (it == groups_.end()) return std::nullopt;
  return it->second.info;
}

std::optional<PlacementGroupId> Scheduler::group_by_name(std::string_view name) const {
  if (name.empty()) return std::nullopt;
  for (const auto& [id, group] : groups_) {
    if (group.info.name == name) return id;
  }
  return std::nullopt;
}

std::vector<Scheduler::GroupInfo> Scheduler::groups() const {
  std::vector<GroupInfo> out;
  for (const auto& entry : groups_)
    out.push_back(entry.second.info);
  return out;
}

}  // namespace troupe::cluster
