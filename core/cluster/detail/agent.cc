#include "core/cluster/detail/agent.h"

#include "absl/strings/str_cat.h"
#include "core/cluster/detail/head.h"

namespace troupe::cluster {

absl::StatusOr<uint64_t> NodeAgent::host(HostRequest request) {
  const ActorTypeInfo* type = find_actor_type(request.spawn.type);
  if (type == nullptr) {
    return absl::NotFoundError(absl::StrCat("actor type ", request.spawn.type,
                                            " is not known on node ", node_->index(),
                                            " (is the library that defines it loaded?)"));
  }
  SpawnOptions options{.max_restarts = request.spawn.max_restarts,
                       .dedicated_thread = request.spawn.dedicated_thread,
                       .mailbox_capacity = request.spawn.mailbox_capacity};
  std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(request.spawn.args.data()),
                                   request.spawn.args.size());
  Reader args(bytes);
  args.set_actor_resolver(&node_->actor_resolver());
  RestartInfo restart{.restart_count = request.restart_count,
                      .reason = absl::UnavailableError(request.restart_reason)};
  auto handle = node_->system().spawn_remote(*type, std::move(options), request.spawn.constructor,
                                             args, ActorId{request.id}, restart);
  if (!handle.ok()) return handle.status();
  // Tell the head when it terminates for good here (not when this node stops).
  ActorRef<HeadService> head = node_->ref<HeadService>(head_service_id(), kHeadNode);
  std::shared_ptr<StopSignal> stop = stop_;
  std::shared_ptr<HostedActors> hosted = hosted_;
  hosted->add(request);
  (*handle)->monitor([head, stop, hosted](ActorId id, const absl::Status& why) {
    hosted->remove(id.value);
    if (!stop->requested.load()) {
      head.tell(&HeadService::actor_died, id.value, std::string(why.message()));
    }
  });
  return request.id;
}

void NodeAgent::kill(uint64_t id, bool restart, std::string reason) {
  if (auto handle = node_->system().find(ActorId{id})) handle->kill(restart, std::move(reason));
}

void NodeAgent::shutdown(std::string reason) {
  stop_->request(std::move(reason));
}

int64_t NodeAgent::actor_count() {
  return static_cast<int64_t>(node_->system().num_actors()) - 1;  // not counting this agent
}

TROUPE_ACTOR_DEFINE(NodeAgent);

}  // namespace troupe::cluster
