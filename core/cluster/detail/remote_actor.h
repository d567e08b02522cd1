// A handle to an actor that lives in another process: what an ActorRef<T>
// holds for it. Calls are encoded (core/codec.h) and sent peer to peer by the
// node (core/cluster/detail/node.h); they fail with ActorDied when the
// actor's node is lost. Internal to core.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "core/detail/actor_handle.h"

namespace troupe::cluster {

class NodeCore;

class RemoteActor final : public detail::ActorHandle {
 public:
  RemoteActor(std::shared_ptr<NodeCore> node, ActorId id, const ActorTypeInfo& type,
              uint32_t location)
      : node_(std::move(node)), id_(id), type_(type), location_(location) {}

  ActorId id() const override { return id_; }
  const ActorTypeInfo& type() const override { return type_; }
  void send(detail::Message* m) override;
  void post_internal(detail::Message* m) override;
  void kill(bool restart, std::string reason) override;
  void monitor(DeathCallback cb) override;

  // The node the actor lives on; changes when it is restarted elsewhere.
  uint32_t location() const { return location_.load(std::memory_order_acquire); }

 private:
  const std::shared_ptr<NodeCore> node_;
  const ActorId id_;
  const ActorTypeInfo& type_;
  std::atomic<uint32_t> location_;
};

}  // namespace troupe::cluster
