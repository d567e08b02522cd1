// Collective groups among actors (Ray's ray.util.collective): allreduce,
// reduce-scatter, allgather, broadcast, barrier and send/recv between the
// actors of a group, over the fastest transport they share, rendezvousing
// through the head's KV store.
//
// Declared by the driver, the actors in rank order, then joined inside each
// actor (its rank is its position in the list):
//
//   troupe::declare_collective_group(*cluster, "dp", {a.id(), b.id(), c.id()});
//   // in a method of each of a, b, c:
//   auto group = troupe::CollectiveGroup::join("dp");
//   group->allreduce(DType::kFloat32, ReduceOp::kAvg, grads.data(), grads.size());
//
// or formed imperatively, each member naming its rank (init_collective_group):
//
//   auto group = troupe::CollectiveGroup::init({.name = "dp", .world_size = 3, .rank = r});
//
// Generations: when a member is lost or the group is aborted, every pending
// operation fails with Aborted on every member - at once when the head
// declares a member's node dead (a frozen machine, not only a broken
// connection), not after the operation's timeout. The driver then declares the
// group again with the survivors and their replacements (a new generation);
// each of them joins afresh. Operations: see transport/collectives/group.h.
//
// Device buffers. A member formed with a device (options.device, or join's
// `device`: the CUDA ordinal troupe::cluster::gpu_ids() gives an actor) may
// pass buffers in that device's memory: each operation goes where its buffers
// live (transport/collectives/routed_group.h). When every member has a device
// of its own, device buffers go through an NCCL communicator of the same
// members and generation, formed through the same store; when some member is
// host-only or two share one GPU, they are staged through host memory and the
// host collectives. NCCL's backend is loaded on the first group formed with a
// device; a group without one never loads it, nor CUDA.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/cluster/cluster.h"
#include "core/ids.h"
#include "transport/collectives/device_collectives.h"
#include "transport/collectives/group.h"
#include "transport/collectives/routed_group.h"

namespace troupe::cluster {
class NodeDeathListeners;
}

namespace troupe {

using transport::Algorithm;
using transport::DevicePath;
using transport::DType;
using transport::ReduceOp;
using transport::Work;

// Declares the next generation of group `name`: `members` in rank order.
// Returns the generation (0 for the first). Errors: InvalidArgument (no
// members, a member twice), and those of reaching the head.
absl::StatusOr<uint64_t> declare_collective_group(Cluster& cluster, const std::string& name,
                                                  const std::vector<ActorId>& members);

struct CollectiveGroupOptions {
  std::string name;
  int world_size = 0;
  int rank = -1;
  uint64_t generation = 0;
  // "ucx" or "tcp"; empty: the first of this node's transports that starts.
  std::string transport;
  // Rendezvous, and each operation's wait for a peer.
  absl::Duration timeout = absl::Seconds(60);
  // This member's device (a CUDA ordinal), whose memory its device buffers
  // are in; -1: host buffers only (the backend is never loaded).
  int device = -1;
  // The backend for device buffers; null: NCCL's, loaded when device >= 0.
  transport::DeviceCollectives* device_backend = nullptr;
};

class CollectiveGroup {
 public:
  // Inside a method of an actor of a declared group: joins its latest
  // generation. Errors: FailedPrecondition (not inside an actor of a cluster
  // process), NotFound (no such group, or this actor is not in it),
  // DeadlineExceeded (a member did not join within `timeout`).
  // `device`: as CollectiveGroupOptions::device; FailedPrecondition when
  // this member or another cannot use its device (no NCCL in this build, no
  // such GPU here).
  static absl::StatusOr<std::unique_ptr<CollectiveGroup>> join(
      const std::string& name, absl::Duration timeout = absl::Seconds(60), int device = -1);
  // Forms the group with an explicit rank, from any code in a cluster
  // process (an actor, or a driver). Errors: InvalidArgument (rank outside
  // the world), FailedPrecondition (not in a cluster process), and those of
  // join.
  static absl::StatusOr<std::unique_ptr<CollectiveGroup>> init(CollectiveGroupOptions options);
  ~CollectiveGroup();

  int rank() const { return group_->rank(); }
  int world_size() const { return group_->size(); }
  uint64_t generation() const { return group_->generation(); }
  const std::string& name() const { return name_; }
  // This member's device (-1: none), and the way device buffers go: kNone
  // (no device), kDevice (NCCL) or kStaged (through host memory, for
  // device_path_reason()).
  int device() const { return group_->device(); }
  DevicePath device_path() const { return group_->path(); }
  const std::string& device_path_reason() const { return group_->path_reason(); }
  // The rendezvous store the group met through (the head's KV store). A
  // group with a device keeps its own NCCL communicator's id there, under
  // "collective/<name>/<generation>/nccl-id": a communicator formed apart
  // through it needs a group name of its own.
  transport::Store& store() { return *store_; }
  // The operations, as transport::Group documents them. The synchronous
  // forms (and wait) let the actor runtime run other actors meanwhile.
  absl::Status allreduce(DType type, ReduceOp op, void* data, size_t count,
                         Algorithm algorithm = Algorithm::kAuto) {
    return wait(allreduce_async(type, op, data, count, algorithm));
  }
  absl::Status reduce_scatter(DType type, ReduceOp op, const void* input, void* output,
                              size_t count) {
    return wait(reduce_scatter_async(type, op, input, output, count));
  }
  absl::Status allgather(const void* input, void* output, size_t bytes) {
    return wait(allgather_async(input, output, bytes));
  }
  absl::Status broadcast(void* data, size_t bytes, int root) {
    return wait(broadcast_async(data, bytes, root));
  }
  absl::Status barrier() { return wait(group_->barrier_async()); }
  absl::Status send(int peer, uint64_t tag, const void* data, size_t bytes) {
    return wait(group_->send_async(peer, tag, data, bytes));
  }
  absl::Status recv(int peer, uint64_t tag, void* data, size_t bytes) {
    return wait(recv_async(peer, tag, data, bytes));
  }

  Work allreduce_async(DType type, ReduceOp op, void* data, size_t count,
                       Algorithm algorithm = Algorithm::kAuto) {
    return group_->allreduce_async(type, op, data, count, algorithm);
  }
  Work reduce_scatter_async(DType type, ReduceOp op, const void* input, void* output,
                            size_t count) {
    return group_->reduce_scatter_async(type, op, input, output, count);
  }
  Work allgather_async(const void* input, void* output, size_t bytes) {
    return group_->allgather_async(input, output, bytes);
  }
  // Blocks of any sizes (MPI_Reduce_scatter, MPI_Allgatherv): see
  // transport/collectives/collectives.h.
  Work reduce_scatter_v_async(DType type, ReduceOp op, const void* input, void* output,
                              std::span<const size_t> counts) {
    return group_->reduce_scatter_v_async(type, op, input, output, counts);
  }
  Work allgather_v_async(const void* input, void* output, std::span<const size_t> bytes) {
    return group_->allgather_v_async(input, output, bytes);
  }
  Work broadcast_async(void* data, size_t bytes, int root) {
    return group_->broadcast_async(data, bytes, root);
  }
  // Sends without copying: `data` stays alive and unchanged until the Work
  // is done (transport::Group::send_borrowed_async).
  Work send_borrowed_async(int peer, uint64_t tag, const void* data, size_t bytes) {
    return group_->send_borrowed_async(peer, tag, data, bytes);
  }
  Work recv_async(int peer, uint64_t tag, void* data, size_t bytes) {
    return group_->recv_async(peer, tag, data, bytes);
  }
  // A receive posted before its message arrives lands in `data` without a
  // copy where the transport can place it; `tag` must be that message's
  // alone (transport::Group::recv_in_place_async).
  Work recv_in_place_async(int peer, uint64_t tag, void* data, size_t bytes) {
    return group_->recv_in_place_async(peer, tag, data, bytes);
  }
  absl::Status recv_in_place(int peer, uint64_t tag, void* data, size_t bytes) {
    return wait(recv_in_place_async(peer, tag, data, bytes));
  }
  // Waits for `work` (inside an actor, without holding up other actors).
  static absl::Status wait(const Work& work);

  // What this member has sent to the others, by kind of operation.
  transport::Traffic traffic() const { return group_->traffic(); }
  // Payload bytes received without a copy (transport::Group).
  uint64_t received_in_place() const { return group_->received_in_place(); }
  // The collective operations this member has issued (transport::Group).
  uint64_t collectives_issued() const { return group_->collectives_issued(); }

  // Fails every pending operation with Aborted on every member, device ones
  // too (the NCCL communicator is aborted); drops the connections to the
  // `lost` ranks (transport::RoutedGroup::abort).
  void abort(const absl::Status& why, const std::vector<int>& lost = {}) {
    group_->abort(why, lost);
  }
  // OK while operations can still complete; the Aborted status once the
  // group was aborted or lost a member: work meant for it can stop early.
  absl::Status failed() const { return group_->failed(); }

 private:
  CollectiveGroup() = default;

  // Aborts the group if the head declares the node of one of its members dead.
  absl::Status watch_member_nodes(const CollectiveGroupOptions& options, uint32_t self_node);

  std::string name_;
  std::shared_ptr<cluster::NodeDeathListeners> listeners_;
  uint64_t listener_ = 0;
  std::unique_ptr<transport::Store> store_;
  std::unique_ptr<transport::Transport> transport_;
  std::unique_ptr<transport::RoutedGroup> group_;  // last: goes first
};

}  // namespace troupe
