// The NCCL backend of collective groups: `size` ranks, one CUDA device each,
// reducing and exchanging tensors in device memory with NCCL. Ranks find each
// other through the rendezvous Store as Communicator's do (communicator.h):
// rank 0 creates NCCL's unique id and publishes it under
// "<group>/<generation>/nccl-id"; the others wait for it. A new generation of
// a group (after a member was lost) gets a new id under a new key.
//
// Operations are asynchronous, as NCCL's are: each is enqueued on a CUDA
// stream - the caller's, or the communicator's own when `stream` is null -
// and returns a NcclWork (nccl_work.h) whose wait() says when it completed.
// Every rank must issue the same collectives in the same order with the same
// counts, types, ops and roots (as with MPI); buffers are device pointers on
// this rank's device, and must stay valid until the operation completes.
// Counts are in elements. Types: DType's float32, float16 and bfloat16
// (NCCL reduces 16-bit types in their own precision, unlike reduce.h). Ops:
// ReduceOp's sum, avg (NCCL's ncclAvg), max and min.
//
// Failures: NCCL runs in non-blocking mode, so no call waits for other ranks
// past the communicator's timeout. A timeout, NCCL's asynchronous error (a
// peer lost), or abort() aborts the communicator (ncclCommAbort): the wait
// that saw the error returns it, and every other pending and later wait
// returns Aborted. Arguments that cannot be right (a root or peer out of
// range) fail only their operation, with InvalidArgument. Aborting does not
// reach the other ranks: each sees its own error or timeout and aborts in
// turn. A failed group is not repaired; form a new generation.
//
// Thread-safety: operations may be issued from any thread (calls are
// serialised); NcclWork::wait and abort() may be called from any thread.
// NCCL refuses two ranks of one communicator on one device.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "transport/collectives/dtype.h"
#include "transport/collectives/nccl/nccl_work.h"
#include "transport/collectives/reduce.h"
#include "transport/collectives/store.h"

namespace troupe::transport {

struct NcclOptions {
  int rank = 0;
  int size = 1;
  // Keys in the store are "<group>/<generation>/nccl-id".
  std::string group = "group";
  uint64_t generation = 0;
  int device = 0;  // the CUDA device ordinal of this rank
  // Bounds the rendezvous and NCCL's initialization together, and then the
  // enqueuing of each operation (not its completion: see NcclWork::wait).
  absl::Duration timeout = absl::Seconds(30);
};

// The version of the NCCL library loaded, as "2.28.9".
std::string nccl_version();

class NcclCommunicator {
 public:
  // Exchanges the unique id through `store` and initializes NCCL's
  // communicator, waiting until every rank has joined. Errors:
  // InvalidArgument (rank, size, device or timeout out of range, or a bad
  // device ordinal); FailedPrecondition (no CUDA device or driver);
  // DeadlineExceeded when a rank does not show up within the timeout (NCCL's
  // initialization is then aborted); NCCL's and CUDA's errors otherwise.
  // On rank 0 NCCL's bootstrap thread for the id outlives a failed
  // rendezvous (NCCL cannot stop it) until the process exits.
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>> create(Store& store,
                                                                  NcclOptions options);
  // Flushes the operations issued (up to the timeout) and destroys NCCL's
  // communicator, or aborts it when that fails. Outstanding NcclWork handles
  // stay valid.
  ~NcclCommunicator();
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const { return options_.rank; }
  int size() const { return options_.size; }
  int device() const { return options_.device; }
  const std::string& group() const { return options_.group; }
  uint64_t generation() const { return options_.generation; }
  absl::Duration timeout() const { return options_.timeout; }
  // The communicator's own stream (non-blocking with respect to the legacy
  // default stream), used when an operation is given no stream. To use the
  // legacy default stream, pass cudaStreamLegacy.
  cudaStream_t stream() const { return stream_; }

  // output[0, count) = op over all ranks of their input[0, count).
  // input == output is in place.
  NcclWork allreduce(const void* input, void* output, size_t count, DType type, ReduceOp op,
                     cudaStream_t stream = nullptr);
  // input holds size() blocks of `count` elements; output (count elements)
  // becomes op over all ranks of their block rank(). In place when output is
  // input + rank() * count elements.
  NcclWork reduce_scatter(const void* input, void* output, size_t count, DType type, ReduceOp op,
                          cudaStream_t stream = nullptr);
  // output (size() * count elements) becomes every rank's `count` elements
  // of input, in rank order. In place when input is output + rank() * count.
  NcclWork allgather(const void* input, void* output, size_t count, DType type,
                     cudaStream_t stream = nullptr);
  // output[0, count) becomes root's input[0, count) on every rank (input is
  // read on root only). In place when input == output.
  NcclWork broadcast(const void* input, void* output, size_t count, DType type, int root,
                     cudaStream_t stream = nullptr);
  // Point to point with another rank: `peer` must call the matching recv
  // (send) with the same count and type. peer == rank() is InvalidArgument:
  // a rank exchanges with itself through send_recv.
  NcclWork send(const void* input, size_t count, DType type, int peer,
                cudaStream_t stream = nullptr);
  NcclWork recv(void* output, size_t count, DType type, int peer, cudaStream_t stream = nullptr);
  // Sends `count` elements of input to `to` and receives `count` from
  // `from` into output, as one NCCL group, so that a ring of ranks shifting
  // data to their neighbours does not deadlock. `to` and `from` may be
  // rank() (a copy).
  NcclWork send_recv(const void* input, int to, void* output, int from, size_t count, DType type,
                     cudaStream_t stream = nullptr);
  // Completes once every rank has reached it on its stream: a 1-element
  // allreduce.
  NcclWork barrier(cudaStream_t stream = nullptr);

  // allgather, broadcast, send and recv of `bytes` bytes of any type (as
  // NCCL's ncclUint8), for groups that move bytes (routed_group.h).
  NcclWork allgather_bytes(const void* input, void* output, size_t bytes,
                           cudaStream_t stream = nullptr);
  NcclWork broadcast_bytes(const void* input, void* output, size_t bytes, int root,
                           cudaStream_t stream = nullptr);
  NcclWork send_bytes(const void* input, size_t bytes, int peer, cudaStream_t stream = nullptr);
  NcclWork recv_bytes(void* output, size_t bytes, int peer, cudaStream_t stream = nullptr);

  // OK, or the Aborted status every wait returns once the communicator was
  // aborted.
  absl::Status failure() const;

  // Aborts the communicator (ncclCommAbort): operations running on the
  // device stop, and every pending and later wait returns Aborted naming
  // `why`. Other ranks are not told.
  void abort(const absl::Status& why);

 private:
  NcclCommunicator(NcclOptions options, std::shared_ptr<detail::NcclState> state,
                   cudaStream_t stream, void* scratch);
  // Issues `call(comm, stream)` (NCCL calls) on `stream`, or on stream_ when
  // that is null, and returns its handle. Defined in the .cc file, the only
  // place it is used.
  template <typename Call>
  NcclWork issue(const char* op, cudaStream_t stream, const Call& call);
  // InvalidArgument unless 0 <= rank < size().
  absl::Status check_rank(const char* op, const char* what, int rank) const;
  // InvalidArgument unless `peer` is a rank other than this one.
  absl::Status check_peer(const char* op, int peer) const;

  const NcclOptions options_;
  const std::shared_ptr<detail::NcclState> state_;
  cudaStream_t stream_;  // owned
  void* scratch_;        // one float32 of device memory, for barrier(); owned
};

}  // namespace troupe::transport
