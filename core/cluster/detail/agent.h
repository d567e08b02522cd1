// NodeAgent: the actor through which the head runs a worker node. It hosts
// actors the head placed here (and reports those that terminate for good),
// kills them on request, and tells the worker process to exit.
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/actor.h"
#include "core/actor_declare.h"
#include "core/cluster/detail/gpu_assignment.h"
#include "core/cluster/detail/node.h"
#include "core/cluster/protocol.h"

namespace troupe::cluster {

class HeadService;

// Set when the node should exit, with the reason; `declared_dead` when the
// head declared it dead (a worker then joins again as a new node).
// `head_lost` when it lost contact with the head for longer than its grace.
struct StopSignal {
  std::atomic<bool> requested{false};
  std::atomic<bool> declared_dead{false};
  std::atomic<bool> head_lost{false};
  std::mutex mu;
  std::string reason;
  void request(std::string why, bool dead = false, bool lost = false) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (requested.load()) return;
      reason = std::move(why);
      declared_dead.store(dead);
      head_lost.store(lost);
    }
    requested.store(true);
  }
};

// The actors a node hosts for the cluster, as the head asked for them: what
// the node tells a restarted head (RejoinRequest), and the GPUs each holds
// (gpu_ids()). Shared by the node's agent, which keeps it, its Member, which
// reads it from its heartbeat thread, and the actors asking for their GPUs.
// Thread-safe.
class HostedActors {
 public:
  // A node of `gpus` GPUs (indices 0..gpus-1).
  explicit HostedActors(int gpus = 0) : gpus_(gpus) {}

  void add(HostRequest request);
  // It is gone: forgets it and frees its GPUs.
  void remove(uint64_t id);
  std::vector<HostRequest> list() const;

  // Gives actor `id` devices for `amount` GPUs (GpuAssignment::assign); one
  // that holds some keeps them. When they are short only because actors told
  // to go (leaving()) still hold some - the head gave their share back when
  // it asked them to go, before they went - waits up to `wait` for those to
  // go. Errors: those of GpuAssignment::assign.
  [[nodiscard]] absl::StatusOr<std::vector<int>> assign_gpus(uint64_t id, double amount,
                                                             absl::Duration wait);
  // Frees what `id` holds (its hosting failed).
  void release_gpus(uint64_t id);
  // The indices `id` holds, ascending; empty if none.
  std::vector<int> gpus_of(uint64_t id) const;
  bool holds_gpus(uint64_t id) const;
  // `id` was told to go for good (it is gone once remove() is called).
  void leaving(uint64_t id);

 private:
  mutable std::mutex mu_;
  std::condition_variable freed_;  // notified when remove() frees GPUs
  std::map<uint64_t, HostRequest> actors_;
  GpuAssignment gpus_;
  std::set<uint64_t> leaving_;
};

// How long a host request waits for GPUs that actors told to go still hold.
inline constexpr absl::Duration kGpuReleaseWait = absl::Seconds(5);

class NodeAgent {
 public:
  NodeAgent(Node* node, std::shared_ptr<StopSignal> stop, std::shared_ptr<HostedActors> hosted)
      : node_(node), stop_(std::move(stop)), hosted_(std::move(hosted)) {}

  // Spawns the requested actor here under its cluster-wide id, holding the
  // GPU devices its resources ask for (HostedActors::assign_gpus) while it
  // lives here, in-place restarts included. Errors: NotFound (type not known
  // here: its library is not loaded), ResourceExhausted or InvalidArgument
  // (the devices cannot be given), and those of ActorSystem::spawn_remote.
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
