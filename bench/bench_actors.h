// Actors for cluster_bench, built as a user actor library (troupe_bench_actors)
// that the workers load with --actor-lib and the bench driver links.
#pragma once

#include <cstdint>
#include <string>

#include "core/actor.h"
#include "transport/buffer.h"

namespace troupe::bench {

// Answers at once: the cost measured is the call, not the work.
class Echo {
 public:
  int64_t ping(int64_t x) const { return x; }
  int64_t size(const std::string& s) const { return static_cast<int64_t>(s.size()); }
  // The Buffer travels out of band (not copied into the call's encoding).
  int64_t bytes(const transport::Buffer& b) const { return static_cast<int64_t>(b.size()); }
  int64_t pid() const;
};
TROUPE_ACTOR(Echo, &Echo::ping, &Echo::size, &Echo::bytes, &Echo::pid);

}  // namespace troupe::bench
