// What an ActorRef points at: an actor in this process (ActorCell) or a proxy
// for one in another process (cluster::RemoteActor). Internal to core.
#pragma once

#include <string>

#include "core/actor_type.h"
#include "core/detail/message.h"
#include "core/ids.h"
#include "core/spawn_options.h"

namespace troupe::detail {

class ActorHandle : public MessageTarget {
 public:
  virtual ActorId id() const = 0;
  virtual const ActorTypeInfo& type() const = 0;
  // Delivers a user message (a call or a tell), blocking while a local
  // mailbox is full; if it cannot be delivered, rejects it with the reason.
  virtual void send(Message* m) = 0;
  // Makes the actor fail after its current message (see ActorSystem::kill).
  virtual void kill(bool restart, std::string reason) = 0;
  // Calls `cb` once when the actor terminates for good.
  virtual void monitor(DeathCallback cb) = 0;
};

}  // namespace troupe::detail
