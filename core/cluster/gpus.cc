#include "core/cluster/gpus.h"

#include <optional>

#include "core/actor_system.h"
#include "core/cluster/detail/member.h"

namespace troupe::cluster {

std::vector<int> gpu_ids() {
  std::optional<ActorId> self = this_actor_id();
  if (!self) return {};
  Member* member = Member::current();
  if (member == nullptr) return {};
  return member->hosted()->gpus_of(self->value);
}

}  // namespace troupe::cluster
