// Actors for the cluster tests, built as a user actor library that the
// workers load (--actor-lib) and the test driver links.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/actor.h"
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
  int64_t add(int64_t a, int64_t b) const { return a + b; }
  std::string echo(std::string s) const { return s; }

 private:
  std::string tag_;
  int restarts_ = 0;
};
TROUPE_ACTOR(Probe, &Probe::pid, &Probe::tag, &Probe::restarts, &Probe::hold, &Probe::add,
             &Probe::echo);
TROUPE_ACTOR_CONSTRUCTOR(Probe, std::string);

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

}  // namespace troupe::testing
