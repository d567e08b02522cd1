// Options for ActorSystem::spawn, named as Ray users know them.
#pragma once

#include <cstddef>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "core/ids.h"

namespace troupe {

struct SpawnOptions {
  // Registers the actor under this name for ActorSystem::lookup; empty for an
  // anonymous actor. A name is free again once its actor has terminated.
  std::string name;
  // Restarts allowed after a failure (a method threw, or kill() asked for a
  // restart). 0: the first failure is final. -1: unlimited.
  int max_restarts = 0;
  // In a cluster: times a call of a TROUPE_IDEMPOTENT method that was in
  // flight when the actor's node was lost is sent again, to the restarted
  // actor (Ray's max_task_retries; -1: unlimited). Other methods are never
  // sent twice: such a call fails with ActorDied (at most once).
  int max_task_retries = 0;
  // Run the actor on a thread of its own instead of the shared pool.
  bool dedicated_thread = false;
  // Messages the mailbox accepts before senders block (back-pressure).
  size_t mailbox_capacity = 1024;
  // How long a sender waits on a full mailbox before its call fails with
  // ResourceExhausted. Infinite by default: the sender waits for room.
  absl::Duration send_timeout = absl::InfiniteDuration();

  // In a cluster (Cluster::spawn), where the actor may run:
  // Resources it holds while alive, "CPU=1,GPU=1,memory=2G,custom=1".
  std::string resources;
  // A placement group (its id) and bundle to draw them from; -1: any bundle.
  uint64_t placement_group = 0;
  int bundle_index = -1;
  // A node to pin it to, or -1 for the scheduler's choice.
  int node = -1;
  // Ray's lifetime="detached": the actor outlives the driver that spawned
  // it, until it is killed (Cluster::kill, `troupe kill`) or the cluster
  // stops. Otherwise it belongs to that driver's job and is removed when the
  // driver ends or dies.
  bool detached = false;
};

// Passed to an actor's on_restart(const RestartInfo&) after a restart, so it
// can restore its state (from a replica, a checkpoint) instead of starting empty.
struct RestartInfo {
  int restart_count = 0;  // 1 for the first restart
  absl::Status reason;    // why the previous incarnation died
};

// Called once when an actor terminates for good, with the reason.
using DeathCallback = std::function<void(ActorId, const absl::Status&)>;

}  // namespace troupe
