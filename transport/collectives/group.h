// Group: a communicator with asynchronous collectives, so that communication
// overlaps compute. Operations are queued in the order they are issued and
// run one at a time, in that order, on the group's worker thread (every rank
// must issue the same operations in the same order, as with MPI or NCCL);
// each returns a Work handle at once. The caller's buffers must stay alive
// and unchanged (inputs) or untouched (outputs) until the Work is done.
//
// Errors: as collectives.h. Once one operation fails, the group is failed:
// every later operation fails the same way, and abort() fails everything
// pending with Aborted on every member. A new generation of the group is a
// new Group (Communicator options: same group name, generation + 1).
//
// Point-to-point send/recv take tags below 2^62 in a space of their own.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "transport/collectives/collectives.h"
#include "transport/collectives/communicator.h"
#include "transport/collectives/work.h"

namespace troupe::transport {

// Payload bytes one rank sent to the others, by kind of operation.
struct Traffic {
  uint64_t allreduce = 0;
  uint64_t reduce_scatter = 0;  // reduce_scatter and reduce_scatter_v
  uint64_t allgather = 0;       // allgather and allgather_v
  uint64_t other = 0;           // broadcast, barrier, send
  uint64_t total() const { return allreduce + reduce_scatter + allgather + other; }
  Traffic operator-(const Traffic& earlier) const {
    return {allreduce - earlier.allreduce, reduce_scatter - earlier.reduce_scatter,
            allgather - earlier.allgather, other - earlier.other};
  }
};

class Group {
 public:
  // Rendezvous (Communicator::create) and start the worker thread.
  static absl::StatusOr<std::unique_ptr<Group>> create(Transport& transport, Store& store,
                                                       CommunicatorOptions options);
  explicit Group(std::unique_ptr<Communicator> comm);
  // Operations still queued or running are aborted (so that no other member
  // waits for this one), then the worker thread is joined.
  ~Group();

  int rank() const { return comm_->rank(); }
  int size() const { return comm_->size(); }
  uint64_t generation() const { return comm_->generation(); }
  const std::string& name() const { return comm_->group(); }

  Work allreduce_async(DType type, ReduceOp op, void* data, size_t count,
                       Algorithm algorithm = Algorithm::kAuto);
  Work reduce_scatter_async(DType type, ReduceOp op, const void* input, void* output, size_t count);
  Work allgather_async(const void* input, void* output, size_t bytes);
  // As transport::reduce_scatter_v and allgather_v (collectives.h); the
  // sizes are copied.
  Work reduce_scatter_v_async(DType type, ReduceOp op, const void* input, void* output,
                              std::span<const size_t> counts);
  Work allgather_v_async(const void* input, void* output, std::span<const size_t> bytes);
  Work broadcast_async(void* data, size_t bytes, int root);
  Work barrier_async();
  // Sends a copy of `bytes` at `data` to `peer` under `tag` (done at once).
  Work send_async(int peer, uint64_t tag, const void* data, size_t bytes);
  // Sends `bytes` at `data` to `peer` under `tag` without copying them: the
  // transport reads them where they are. The Work is done once the transport
  // has let go of them (sent, or the connection dropped), so they must stay
  // alive and unchanged until then. Runs at once, as send_async.
  Work send_borrowed_async(int peer, uint64_t tag, const void* data, size_t bytes);
  // Receives exactly `bytes` from `peer` under `tag` into `data`, when the
  // operations queued before it are done.
  Work recv_async(int peer, uint64_t tag, void* data, size_t bytes);
  // As recv_async, but where the transport can place a payload (UCX, above
  // its eager size) and the message has not begun to arrive by this call,
  // the payload lands in `data` directly, without a copy: post it early.
  // REQUIRES: `tag` is this message's alone from `peer` (no earlier message
  // under it may still be on its way, nor a later one sent before this
  // receive is done), and `data` is not used by an operation queued before
  // it: it may be written from this call on.
  Work recv_in_place_async(int peer, uint64_t tag, void* data, size_t bytes);

  // The kinds of operation traffic() counts apart.
  enum class Kind { kAllreduce, kReduceScatter, kAllgather, kOther };
  // Runs `run` in its turn on the worker thread, ordered with the operations
  // above on every rank, for an operation composed of those of
  // collectives.h over the communicator (a collective on device memory
  // staged through host memory: routed_group.h). What it sends counts in
  // traffic() under `kind`; `collective`: whether every rank issues it (it
  // counts in collectives_issued), or it is point to point.
  Work run_async(Kind kind, std::function<absl::Status(Communicator&)> run,
                 bool collective = true) {
    return enqueue(kind, std::move(run), collective);
  }

  // Synchronous forms: the async form, waited for.
  absl::Status allreduce(DType type, ReduceOp op, void* data, size_t count,
                         Algorithm algorithm = Algorithm::kAuto) {
    return allreduce_async(type, op, data, count, algorithm).wait();
  }
  absl::Status reduce_scatter(DType type, ReduceOp op, const void* input, void* output,
                              size_t count) {
    return reduce_scatter_async(type, op, input, output, count).wait();
  }
  absl::Status allgather(const void* input, void* output, size_t bytes) {
    return allgather_async(input, output, bytes).wait();
  }
  absl::Status broadcast(void* data, size_t bytes, int root) {
    return broadcast_async(data, bytes, root).wait();
  }
  absl::Status barrier() { return barrier_async().wait(); }
  absl::Status send(int peer, uint64_t tag, const void* data, size_t bytes) {
    return send_async(peer, tag, data, bytes).wait();
  }
  absl::Status recv(int peer, uint64_t tag, void* data, size_t bytes) {
    return recv_async(peer, tag, data, bytes).wait();
  }

  // Fails every pending and later operation with Aborted(why), here and on
  // every member still reachable. Returns at once; the operation running
  // now returns within moments. The connections to `lost` ranks (known to be
  // gone or hung) are dropped, so that sends stuck on them let go of their
  // buffers.
  void abort(const absl::Status& why, const std::vector<int>& lost = {});

  // What this rank has sent since the group was formed, counted as each
  // operation finishes.
  Traffic traffic() const;
  // Payload bytes recv_in_place_async took where the transport placed them,
  // without a copy, since the group was formed.
  uint64_t received_in_place() const { return received_in_place_.load(); }
  // OK while operations can still complete; the Aborted status they fail
  // with once the group was aborted or lost a member (Communicator::failed).
  absl::Status failed() const { return comm_->failed(); }

  // The collective operations this rank has issued since the group was
  // formed (point-to-point ones aside). Every rank issues the same ones in
  // the same order, so a rank whose count is behind the others' has not
  // reached the operation they wait in (PyTorch's collective sequence
  // number): how a hung rank is told from those waiting for it.
  uint64_t collectives_issued() const { return collectives_issued_.load(); }

 private:
  struct Op {
    std::function<absl::Status(Communicator&)> run;
    Work work;
    Kind kind = Kind::kOther;
  };
  // `collective`: counted in collectives_issued (a recv is not).
  Work enqueue(Kind kind, std::function<absl::Status(Communicator&)> run, bool collective = true);
  // InvalidArgument unless `peer` is a rank and `tag` a point-to-point tag.
  absl::Status check_point_to_point(const char* what, int peer, uint64_t tag) const;
  // Hands `data` to the communicator for `peer`, counting it as sent.
  absl::Status post(int peer, uint64_t tag, Buffer data);
  Work receive(int peer, uint64_t tag, void* data, size_t bytes, bool in_place);
  void run_worker();

  std::unique_ptr<Communicator> comm_;
  mutable std::mutex mu_;
  std::condition_variable queued_;
  std::deque<Op> queue_;
  bool running_ = false;  // an operation is being run
  bool stopping_ = false;
  Traffic traffic_;  // under mu_
  // What send_async sent: the worker leaves it out of the operation running meanwhile.
  std::atomic<uint64_t> point_to_point_sent_{0};
  std::atomic<uint64_t> collectives_issued_{0};
  std::atomic<uint64_t> received_in_place_{0};
  std::thread worker_;
};

}  // namespace troupe::transport
