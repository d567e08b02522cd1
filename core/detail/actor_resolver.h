// How an ActorRef crosses processes (Codec<ActorRef<T>> in core/actor_ref.h):
// a cluster node gives the Writer and Reader of every call it sends or serves
// one of these, so that a handle written in one process is callable where it
// is read. Internal to core.
#pragma once

#include <cstdint>

#include "core/actor_type.h"
#include "core/detail/actor_handle.h"
#include "core/detail/ref_counted.h"
#include "core/ids.h"

namespace troupe::detail {

class ActorResolver {
 public:
  virtual ~ActorResolver() = default;
  // The node at which `handle`'s actor is reached now: this node for an
  // actor of this process, the last known one for an actor of another.
  virtual uint32_t location_of(const ActorHandle& handle) const = 0;
  // A handle, in this process, to actor `id` of `type` last seen on `node`:
  // the actor itself when it lives here, else a proxy that calls it there.
  virtual IntrusivePtr<ActorHandle> resolve(ActorId id, const ActorTypeInfo& type,
                                            uint32_t node) = 0;
};

}  // namespace troupe::detail
