// NodeAgent: the actor through which the head runs a worker node. It hosts
// actors the head placed here (and reports those that terminate for good),
// kills them on request, and tells the worker process to exit.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include "core/actor.h"
#include "core/cluster/detail/node.h"
#include "core/cluster/protocol.h"

namespace troupe::cluster {

class HeadService;

// Set when the node should exit, with the reason.
struct StopSignal {
  std::atomic<bool> requested{false};
  std::mutex mu;
  std::string reason;
  void request(std::string why) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (requested.load()) return;
      reason = std::move(why);
    }
    requested.store(true);
  }
};

class NodeAgent {
 public:
  NodeAgent(Node* node, std::shared_ptr<StopSignal> stop) : node_(node), stop_(std::move(stop)) {}

  // Spawns the requested actor here under its cluster-wide id. Errors:
  // NotFound (type not known here: its library is not loaded), and those of
  // ActorSystem::spawn_remote.
  absl::StatusOr<uint64_t> host(HostRequest request);
  void kill(uint64_t id, bool restart, std::string reason);
  void shutdown(std::string reason);
  // Actors alive here, for status and tests.
  int64_t actor_count();

 private:
  Node* const node_;
  std::shared_ptr<StopSignal> stop_;
};
TROUPE_ACTOR(NodeAgent, &NodeAgent::host, &NodeAgent::kill, &NodeAgent::shutdown,
             &NodeAgent::actor_count);

}  // namespace troupe::cluster
