// Scheduler: the head node's resource ledger and placement logic. Pure
// bookkeeping: no networking, no threads, no clocks. NOT thread-safe; the head
// calls it from one thread (or under one lock).
//
// Ledger. Each node has a total and an available pool. Invariant, per node and
// per resource:
//   available = total - (bundles reserved on it) - (ungrouped actors on it)
// and, per placed bundle, bundle_available = bundle - (actors drawn from it).
// A bundle's reservation comes out of its node's pool when its group is
// placed and goes back when the group is removed or unplaced.
//
// Actors. place_actor() picks a node (or a bundle of a placement group) and
// reserves the request; release_actor() returns it. A release that no longer
// matches the ledger (the node or group is gone, or was placed again since)
// is ignored, and a release never raises an amount above what it came from.
//
// Placement groups (as in Ray). A group is a list of bundles reserved
// together, all or nothing, by a strategy:
//   STRICT_PACK    every bundle on one node
//   PACK           as few nodes as possible, best effort
//   STRICT_SPREAD  every bundle on a different node
//   SPREAD         different nodes where possible, best effort
// A group that cannot be placed now is kept PENDING and reserves nothing;
// retry_pending() places those that fit, in creation order. Call it when a
// node joins or resources are freed; the scheduler never retries by itself.
//
// Failures. remove_node() drops the node and everything on it. Every group
// with a bundle there becomes pending again, as in Ray: its bundles on the
// surviving nodes stay reserved (their actors keep running and keep their
// reservations), and retry_pending() re-places only the lost bundles, by the
// group's strategy counted with the bundles that stayed (SPREAD and
// STRICT_SPREAD away from their nodes, PACK onto them). Actors drawn from a
// lost bundle, or from a removed group, lose their reservation with it: the
// caller is expected to stop or restart them; their later release_actor()
// calls are ignored.
#pragma once

#include <compare>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/cluster/detail/resources.h"
#include "core/cluster/placement.h"

namespace troupe::cluster {

using NodeIndex = uint32_t;  // assigned by the head; 0 is the head itself

// Where an actor may go.
struct PlacementRequest {
  Resources resources;                    // held while the actor lives (Ray: nothing by default)
  std::optional<NodeIndex> node;          // pin to this node
  std::optional<PlacementGroupId> group;  // draw from this placement group's bundle...
  int bundle_index = -1;                  // ...this one, or -1 for the first with room
};

// Where an actor went. Pass it back unchanged to release_actor().
struct Placement {
  NodeIndex node = 0;
  std::optional<PlacementGroupId> group;
  int bundle_index = -1;
  // The incarnation of the node or group placement the reservation came from,
  // so that a release after the node rejoined or the group was re-placed is
  // recognised as stale. 0 (a hand-made Placement) skips that check.
  uint64_t epoch = 0;
};

class Scheduler {
 public:
  // --- Nodes -------------------------------------------------------------

  // Adds a node offering `total`. If the node is already present its total is
  // replaced and what is in use on it stays in use (available may go below
  // zero until actors are released). Does not retry pending groups.
  void add_node(NodeIndex node, Resources total);
  // Removes a node, its actors and its bundles. Returns the groups that had a
  // bundle on it, in creation order; they are pending again (see the top of
  // this file). Unknown node: no-op, returns {}.
  std::vector<PlacementGroupId> remove_node(NodeIndex node);
  // A draining node (`troupe drain`) takes no new actors or bundles: actors
  // drawn from bundles already on it, and actors pinned to it, still go
  // there. Unknown node: no-op.
  void set_draining(NodeIndex node, bool draining);
  bool draining(NodeIndex node) const;
  // Every node, ascending.
  std::vector<NodeIndex> nodes() const;
  // A node's total and unreserved resources; empty for an unknown node.
  Resources total(NodeIndex node) const;
  Resources available(NodeIndex node) const;

  // --- Actors ------------------------------------------------------------

  // Chooses where an actor goes and reserves request.resources there.
  //   Without a group: among the nodes (not in `excluded`; only request.node
  //   if pinned) whose available pool contains the request, the one with the
  //   most CPU left afterwards (spreads load); ties go to the lowest index.
  //   With a group: the reservation comes from the bundle (bundle_index, or
  //   the lowest-numbered bundle with room, skipping bundles on excluded
  //   nodes and, if pinned, bundles on other nodes), not from the node's pool.
  // Errors:
  //   InvalidArgument   a negative amount; a bad bundle index; a request
  //                     bigger than the whole bundle (or every bundle); a pin
  //                     to an excluded node or away from the chosen bundle
  //   NotFound          unknown pinned node or group
  //   Unavailable       the group is pending (not placed yet); retry later
  //   ResourceExhausted nothing has room now; the message names the request
  //                     and the largest free amounts seen
  [[nodiscard]] absl::StatusOr<Placement> place_actor(const PlacementRequest& request,
                                                      const std::set<NodeIndex>& excluded = {});
  // Returns an actor's resources to where place_actor() took them from.
  // Stale or unknown placements are ignored (see the top of this file).
  void release_actor(const Placement& where, const Resources& resources);

  // --- Placement groups --------------------------------------------------

  // Creates a group and tries to place it at once (even when older groups
  // are pending); returns its id whether placed or pending: `id` if given
  // (the head draws ids that outlive it), else the next after every id seen.
  // `targets` (SPREAD only; empty, or one per bundle): the node each bundle
  // should go to, where it has room when the group is first placed (Ray's
  // soft target node); the bundles without a target, or whose target has no
  // room, are spread by the strategy, away from the targeted nodes first.
  // Errors: InvalidArgument (no bundles, an empty bundle, a negative amount,
  // targets with another strategy or of another count), AlreadyExists
  // (another group has the same non-empty name, or that id).
  [[nodiscard]] absl::StatusOr<PlacementGroupId> create_placement_group(
      std::vector<Resources> bundles, PlacementStrategy strategy, std::string name = "",
      std::optional<PlacementGroupId> id = std::nullopt,
      std::vector<std::optional<NodeIndex>> targets = {});
  // Removes a group, placed or pending. Its whole bundles go back to their
  // nodes, including what its actors still hold (they keep running; the
  // caller stops them; their releases are ignored). NotFound if unknown.
  [[nodiscard]] absl::Status remove_placement_group(PlacementGroupId id);
  // Tries every pending group, in creation order, against what is free now;
  // returns those placed.
  std::vector<PlacementGroupId> retry_pending();
  // Whether group `id` could be placed on the nodes there are now were every
  // one of them idle: OK if so (or the group is placed), else
  // ResourceExhausted naming the shortfall - the group waits for nodes that
  // may never come. NotFound if unknown.
  absl::Status check_feasible(PlacementGroupId id) const;

  struct GroupInfo {
    PlacementGroupId id;
    std::string name;
    PlacementStrategy strategy = PlacementStrategy::kPack;
    std::vector<Resources> bundles;
    std::vector<std::optional<NodeIndex>> targets;  // empty, or one per bundle
    bool placed = false;
    // The node of each bundle, and what is left in it; empty while no bundle
    // is placed. While a group that lost bundles is pending again, a lost
    // bundle's entry names the node it was lost with, and `lost` says which.
    std::vector<NodeIndex> bundle_nodes;
    std::vector<Resources> bundle_available;
    std::vector<bool> lost;
  };
  std::optional<GroupInfo> group(PlacementGroupId id) const;
  std::optional<PlacementGroupId> group_by_name(std::string_view name) const;
  // Every group, in creation order.
  std::vector<GroupInfo> groups() const;

 private:
  struct NodeState {
    Resources total;
    Resources available;
    Resources reserved;  // by placed bundles
    uint64_t epoch = 0;
    bool draining = false;
  };
  struct GroupState {
    GroupInfo info;
    // Per bundle, the epoch of its current placement; 0 while not placed.
    std::vector<uint64_t> bundle_epochs;
    // Whether any bundle holds a reservation (placed, or pending after a loss).
    bool holds() const { return !info.bundle_nodes.empty(); }
  };

  absl::StatusOr<Placement> place_ungrouped(const PlacementRequest& request,
                                            const std::set<NodeIndex>& excluded);
  absl::StatusOr<Placement> place_in_group(const PlacementRequest& request,
                                           const std::set<NodeIndex>& excluded);
  absl::Status exhausted_error(const Resources& request, const std::set<NodeIndex>& excluded,
                               std::optional<NodeIndex> pinned) const;
  // What is free on each node that takes new placements (not draining).
  std::map<NodeIndex, Resources> schedulable() const;
  // Reserves the group's bundles (after a loss: its lost bundles) if they
  // all fit now; true when placed.
  bool try_place(GroupState& group);
  // The node of each of a group's lost bundles, by strategy, counted with the
  // bundles that stayed; nullopt if they do not fit now.
  std::optional<std::vector<NodeIndex>> assign_lost(const GroupState& group) const;
  // Returns a placed group's bundles to the surviving nodes; it becomes pending.
  void unplace(GroupState& group);

  std::map<NodeIndex, NodeState> nodes_;
  std::map<PlacementGroupId, GroupState> groups_;  // ids grow: map order is creation order
  uint64_t next_group_id_ = 1;
  uint64_t next_epoch_ = 1;
};

}  // namespace troupe::cluster
