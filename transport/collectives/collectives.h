// Collective operations over a Communicator, synchronous: each returns when
// this rank's part is done. Every rank of the communicator must issue the
// same operations in the same order with the same arguments (sizes, root,
// algorithm), as with MPI; each call takes the communicator's next sequence
// number, which keeps the messages of successive operations apart.
//
// Errors (all operations): those of Communicator::recv - Aborted (abort() on
// any member, or a member lost), DeadlineExceeded -
// and InvalidArgument for arguments that cannot be right (a root out of
// range). After an error the communicator's group is failed: form a new
// generation.
//
// Determinism: for a given membership, algorithm and input, every rank gets
// the same bits on every run (each element is reduced in one fixed order and
// handed out from the rank that reduced it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "transport/collectives/communicator.h"
#include "transport/collectives/dtype.h"
#include "transport/collectives/reduce.h"

namespace troupe::transport {

enum class Algorithm : uint8_t {
  kAuto,             // chosen by size and topology (see choose_algorithm)
  kRing,             // bandwidth-optimal: 2(n-1)/n of the data per rank
  kHalvingDoubling,  // recursive halving-doubling: 2 log2(n) steps, for small messages
  kHierarchical,     // reduce inside each host, allreduce across hosts, broadcast inside
  kSharedMemory,     // every rank on one host: through shared memory (shared_memory.h)
};
std::string_view to_string(Algorithm algorithm);  // "auto", "ring", "halving-doubling", ...
// Parses the names to_string gives. InvalidArgument for anything else.
absl::StatusOr<Algorithm> parse_algorithm(std::string_view name);

// The algorithm kAuto runs for an allreduce of `bytes` on `comm`: shared
// memory when every rank runs on this host (Communicator::shared_segment),
// else halving-doubling below 64 KiB, hierarchical when ranks share hosts and
// there is more than one host, ring otherwise. Never returns kAuto.
Algorithm choose_algorithm(const Communicator& comm, size_t bytes);

// data[0, count) = op over all ranks of their data[0, count), in place.
absl::Status allreduce(Communicator& comm, DType type, ReduceOp op, void* data, size_t count,
                       Algorithm algorithm = Algorithm::kAuto);

// input holds size() blocks of `count` elements; output (count elements)
// becomes op over all ranks of their block rank(). input and output may not
// overlap. Runs the ring algorithm (kRing) or shared memory (kSharedMemory);
// kAuto takes shared memory where allreduce would, else the ring (anything
// else is InvalidArgument).
absl::Status reduce_scatter(Communicator& comm, DType type, ReduceOp op, const void* input,
                            void* output, size_t count, Algorithm algorithm = Algorithm::kAuto);

// output (size() * bytes) becomes every rank's `bytes` of input, in rank
// order. input may be output + rank() * bytes (in place).
absl::Status allgather(Communicator& comm, const void* input, void* output, size_t bytes);

// MPI_Reduce_scatter: input holds size() consecutive blocks, block i of
// counts[i] elements (any may be 0); output (counts[rank()] elements)
// becomes op over all ranks of their block rank(). input and output may not
// overlap, unless output is input's block rank() itself. Ring algorithm, or
// shared memory where allreduce would take it.
// InvalidArgument unless counts has size() entries.
absl::Status reduce_scatter_v(Communicator& comm, DType type, ReduceOp op, const void* input,
                              void* output, std::span<const size_t> counts);

// MPI_Allgatherv: output holds size() consecutive blocks, block i of
// bytes[i] bytes (any may be 0), and becomes every rank's input in rank
// order; input (bytes[rank()]) may be output's block rank() (in place).
// InvalidArgument unless bytes has size() entries.
absl::Status allgather_v(Communicator& comm, const void* input, void* output,
                         std::span<const size_t> bytes);

// data (bytes) becomes root's data on every rank.
absl::Status broadcast(Communicator& comm, void* data, size_t bytes, int root);

// Returns once every rank has entered the barrier.
absl::Status barrier(Communicator& comm);

}  // namespace troupe::transport
