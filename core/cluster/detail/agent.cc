#include "core/cluster/detail/agent.h"

#include "absl/strings/str_cat.h"
#include "core/cluster/detail/head.h"
#include "core/cluster/detail/resources.h"
#include "core/cluster/gpus.h"

namespace troupe::cluster {

void HostedActors::add(HostRequest request) {
  std::lock_guard<std::mutex> lock(mu_);
  actors_[request.id] = std::move(request);
}

void HostedActors::remove(uint64_t id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    actors_.erase(id);
    leaving_.erase(id);
    gpus_.release(id);
  }
  freed_.notify_all();
}

std::vector<HostRequest> HostedActors::list() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<HostRequest> out;
  for (const auto& [id, r] : actors_)
    out.push_back(r);
  return out;
}

absl::StatusOr<std::vector<int>> HostedActors::assign_gpus(uint64_t id, double amount,
                                                           absl::Duration wait) {
  const absl::Time deadline = absl::Now() + wait;
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    absl::StatusOr<std::vector<int>> given = gpus_.assign(id, amount);
    if (given.ok() || !absl::IsResourceExhausted(given.status())) return given;
    bool leaving_hold = false;
    for (uint64_t other : leaving_)
      leaving_hold = leaving_hold || gpus_.holds(other);
    const absl::Time now = absl::Now();
    if (!leaving_hold || now >= deadline) return given;
    freed_.wait_for(lock, absl::ToChronoNanoseconds(deadline - now));
  }
}

void HostedActors::release_gpus(uint64_t id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    gpus_.release(id);
  }
  freed_.notify_all();
}

std::vector<int> HostedActors::gpus_of(uint64_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return gpus_.of(id);
}

bool HostedActors::holds_gpus(uint64_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return gpus_.holds(id);
}

void HostedActors::leaving(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (actors_.contains(id)) leaving_.insert(id);
}

absl::StatusOr<uint64_t> NodeAgent::host(HostRequest request) {
  const ActorTypeInfo* type = find_actor_type(request.spawn.type);
  if (type == nullptr) {
    return absl::NotFoundError(absl::StrCat("actor type ", request.spawn.type,
                                            " is not known on node ", node_->index(),
                                            " (is the library that defines it loaded?)"));
  }
  // Its GPUs first, so that they are its own from its first message on.
  absl::StatusOr<Resources> asked = Resources::parse(request.spawn.resources);
  const double gpus = asked.ok() ? asked->get(kGpu) : 0;
  const bool held = hosted_->holds_gpus(request.id);  // hosted here already
  absl::StatusOr<std::vector<int>> devices =
      hosted_->assign_gpus(request.id, gpus, kGpuReleaseWait);
  if (!devices.ok()) {
    return absl::Status(
        devices.status().code(),
        absl::StrCat("node ", node_->index(), " cannot give ", to_string(ActorId{request.id}), " (",
                     request.spawn.type, ") its GPUs: ", devices.status().message()));
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
  auto handle = [&] {
    ConstructingActor constructing(request.id);  // its gpu_ids() in its constructor
    return node_->system().spawn_remote(*type, std::move(options), request.spawn.constructor, args,
                                        ActorId{request.id}, restart);
  }();
  if (!handle.ok()) {
    if (!held) hosted_->release_gpus(request.id);
    return handle.status();
  }
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
  if (!restart) hosted_->leaving(id);
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
