// NodeAgent: the actor through which the head runs a worker node. It hosts
// actors the head placed here (and reports those that terminate for good),
// kills them on request, and tells the worker process to exit.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/actor.h"
#include "core/actor_declare.h"
#include "core/cluster/detail/node.h"
#include "core/cluster/protocol.h"

namespace troupe::cluster {

class HeadService;

// Set when the node should exit, with the reason; `declared_dead` when the
// head declared it dead (a worker then joins again as a new node).
struct StopSignal {
  std::atomic<bool> requested{false};
  std::atomic<bool> declared_dead{false};
  std::mutex mu;
  std::string reason;
  void request(std::string why, bool dead = false) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (requested.load()) return;
      reason = std::move(why);
      declared_dead.store(dead);
    }
    requested.store(true);
  }
};

// The actors a node hosts for the cluster, as the head asked for them: what
// the node tells a restarted head (RejoinRequest). Shared by the node's agent,
// which keeps it, and its Member, which reads it from its heartbeat thread.
class HostedActors {
 public:
  void add(HostRequest request) {
    std::lock_guard<std::mutex> lock(mu_);
    actors_[request.id] = std::move(request);
  }
  void remove(uint64_t id) {
    std::lock_guard<std::mutex> lock(mu_);
    actors_.erase(id);
  }
  std::vector<HostRequest> list() const {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<HostRequest> out;
    for (const auto& [id, r] : actors_)
      out.push_back(r);
    return out;
  }

 private:
  mutable std::mutex mu_;
  std::map<uint64_t, HostRequest> actors_;
};

class NodeAgent {
 public:
  NodeAgent(Node* node, std::shared_ptr<StopSignal> stop, std::shared_ptr<HostedActors> hosted)
      : node_(node), stop_(std::move(stop)), hosted_(std::move(hosted)) {}

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
  std::shared_ptr<HostedActors> hosted_;
};
TROUPE_ACTOR_DECLARE(NodeAgent, &NodeAgent::host, &NodeAgent::kill, &NodeAgent::shutdown,
                     &NodeAgent::actor_count);

}  // namespace troupe::cluster
