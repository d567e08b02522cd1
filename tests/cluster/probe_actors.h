// Actors for the cluster tests, built as a user actor library that the
// workers load (--actor-lib) and the test driver links.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/actor.h"
#include "core/cluster/cluster.h"
#include "core/cluster/collective_group.h"

namespace troupe::testing {

// Tells where it runs and how often it was restarted.
class Probe {
 public:
  Probe() = default;
  explicit Probe(std::string tag) : tag_(std::move(tag)) {}
  int64_t pid() const;
  std::string tag() const { return tag_; }
  int restarts() const { return restarts_; }
  void on_restart(const RestartInfo& info) { restarts_ = info.restart_count; }
  // Runs for `ms` milliseconds (a long call to be caught in flight).
  bool hold(int ms);
  // The same, but not marked idempotent: never sent twice.
  bool hold_once(int ms) { return hold(ms); }
  int64_t add(int64_t a, int64_t b) const { return a + b; }
  std::string echo(std::string s) const { return s; }

 private:
  std::string tag_;
  int restarts_ = 0;
};
TROUPE_ACTOR(Probe, &Probe::pid, &Probe::tag, &Probe::restarts, &Probe::hold, &Probe::add,
             &Probe::echo, &Probe::hold_once);
TROUPE_IDEMPOTENT(Probe, &Probe::hold, &Probe::pid);
TROUPE_ACTOR_CONSTRUCTOR(Probe, std::string);

// Handed other actors: a partner through its constructor, others through
// its methods and by name; calls them from its worker.
class Relay {
 public:
  Relay() = default;
  explicit Relay(ActorRef<Probe> partner) : partner_(std::move(partner)) {}
  Future<std::string> partner_tag() const { return partner_.call(&Probe::tag); }
  ActorRef<Probe> partner() const { return partner_; }
  Future<int64_t> pid_of(ActorRef<Probe> probe) const { return probe.call(&Probe::pid); }
  // The tag of the actor named `name`, found from here (get_actor).
  absl::StatusOr<std::string> tag_of_named(std::string name) const;
  int64_t pid() const;

 private:
  ActorRef<Probe> partner_;
};
TROUPE_ACTOR(Relay, &Relay::partner_tag, &Relay::partner, &Relay::pid_of, &Relay::tag_of_named,
             &Relay::pid);
TROUPE_ACTOR_CONSTRUCTOR(Relay, ActorRef<Probe>);

// A member of a collective group among actors.
class Reducer {
 public:
  // Joins the latest generation of declared group `name`; returns its rank.
  absl::StatusOr<int> join(std::string name);
  // `iterations` allreduces (fp32 sum) of `count` elements, each (rank + 1):
  // the last result's first element, or the first error.
  absl::StatusOr<double> allreduce(int64_t count, int iterations);
  int64_t pid() const;

 private:
  std::unique_ptr<CollectiveGroup> group_;
};
TROUPE_ACTOR(Reducer, &Reducer::join, &Reducer::allreduce, &Reducer::pid);

// Kills its own process as it is constructed if it can remove `armed_file`:
// the first node that hosts it dies while hosting it, the next one keeps it.
class Tripwire {
 public:
  explicit Tripwire(std::string armed_file);
  int64_t pid() const;
};
TROUPE_ACTOR(Tripwire, &Tripwire::pid);
TROUPE_ACTOR_CONSTRUCTOR(Tripwire, std::string);

// Says which GPUs it holds (troupe::cluster::gpu_ids()), now and when it was constructed.
class GpuUser {
 public:
  GpuUser();
  std::vector<int> gpu_ids() const;
  std::vector<int> constructed_with() const { return constructed_with_; }
  // Runs for `ms` milliseconds (to be caught in flight).
  bool hold(int ms);

 private:
  std::vector<int> constructed_with_;
};
TROUPE_ACTOR(GpuUser, &GpuUser::gpu_ids, &GpuUser::constructed_with, &GpuUser::hold);

}  // namespace troupe::testing
