// The GPUs an actor holds, as Ray's ray.get_gpu_ids().
//
// An actor spawned with GPUs in its resources (SpawnOptions::resources =
// "GPU=1") is given devices of its node's by the node hosting it:
//   GPU=k, k whole   k devices no other actor holds, the lowest free first
//   GPU=f, 0 < f < 1 one device with at least f of it free; fractions pack,
//                    so two GPU=0.5 actors share one device
// It holds them while it lives on that node, across in-place restarts (its
// max_restarts) and a restart of the head; they are freed when it is gone
// (killed, out of restarts, its job or placement group removed), for the
// next actor. Restarted on another node (its node was lost), it gets that
// node's devices.
//
// Indices are CUDA's device numbers in the worker's process (after the
// worker's CUDA_VISIBLE_DEVICES; docs/cluster.md, "GPUs"). Actors share
// their worker's process, so troupe does not narrow CUDA_VISIBLE_DEVICES per
// actor as Ray does per worker process: select the device yourself, e.g.
// cudaSetDevice(troupe::cluster::gpu_ids()[0]).
#pragma once

#include <cstdint>
#include <vector>

namespace troupe::cluster {

// The device indices the calling actor holds, ascending: call it from the
// actor's constructor, methods or on_restart (its devices are assigned
// before it is constructed, so that a model can be made on them there).
// Empty outside them (a driver's thread, any other thread), for an actor
// that asked for no GPU, and for one not hosted by a cluster worker (an
// ActorSystem of its own, a driver's local actor). Thread-safe; it takes a
// lock and copies a few ints.
std::vector<int> gpu_ids();

// While alive, gpu_ids() on this thread answers for actor `id`: the node's
// agent holds one around the constructor of an actor it hosts (which runs on
// the agent's thread, before the actor exists). Not for actor code.
class ConstructingActor {
 public:
  explicit ConstructingActor(uint64_t id);
  ~ConstructingActor();
  ConstructingActor(const ConstructingActor&) = delete;
  ConstructingActor& operator=(const ConstructingActor&) = delete;

 private:
  uint64_t previous_;
};

}  // namespace troupe::cluster
