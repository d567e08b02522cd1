#include "core/cluster/gpus.h"

#include <optional>

#include "core/actor_system.h"
#include "core/cluster/detail/member.h"

namespace troupe::cluster {
namespace {

// The actor whose constructor runs on this thread as its node hosts it (0: none).
thread_local uint64_t tl_constructing = 0;

}  // namespace

ConstructingActor::ConstructingActor(uint64_t id) : previous_(tl_constructing) {
  tl_constructing = id;
}

ConstructingActor::~ConstructingActor() {
  tl_constructing = previous_;
}

std::vector<int> gpu_ids() {
  Member* member = Member::current();
  if (member == nullptr) return {};
  // In its constructor the hosting node's agent is the running actor; the one being made is
  // the one asking.
  if (tl_constructing != 0) return member->hosted()->gpus_of(tl_constructing);
  std::optional<ActorId> self = this_actor_id();
  if (!self) return {};
  return member->hosted()->gpus_of(self->value);
}

}  // namespace troupe::cluster
