// Collectives through shared memory, for a communicator whose ranks all run
// on one host (Communicator::shared_segment): no transport, no frames, no
// rendezvous. Each rank copies its data into its own buffer in the segment
// and raises its flag; the others read it from there. Large data goes in
// pieces of SharedSegment::kBufferBytes, two buffers per rank so that the
// next piece is copied in while the last is still being read.
//
// allreduce: up to kWholeExchangeBytes every rank reduces the whole vector
// from every buffer (one exchange); above, rank i reduces the i-th part of
// each piece and the others copy it from there (reduce-scatter, allgather).
// Every element is reduced in rank order by one rank, so every rank gets the
// same bits. allgather of blocks from 64 KiB up, where the system lets ranks
// read each other's memory (SharedSegment::cross_memory), reads every other
// block straight from its owner's input (process_vm_readv: one copy, as
// Open MPI's vader does), and no rank returns before the others have read
// its block.
//
// Waiting spins, then sleeps on the flag (a futex in the segment); it ends
// with the group's failure once the communicator is aborted or loses a
// member, or with DeadlineExceeded after the communicator's timeout. A rank
// whose operation fails aborts the group, so no other waits on it.
#pragma once

#include <cstddef>
#include <span>

#include "absl/status/status.h"
#include "transport/collectives/communicator.h"
#include "transport/collectives/dtype.h"
#include "transport/collectives/reduce.h"

namespace troupe::transport::detail {

// Up to this many bytes an allreduce exchanges the whole vector once.
inline constexpr size_t kWholeExchangeBytes = 32 * 1024;

// As allreduce(), with op already kSum for kAvg. REQUIRES: comm.shared_segment().
absl::Status shm_allreduce(Communicator& comm, DType type, ReduceOp op, void* data, size_t count);
// As reduce_scatter_v(); op already kSum for kAvg.
absl::Status shm_reduce_scatter(Communicator& comm, DType type, ReduceOp op, const void* input,
                                void* output, std::span<const size_t> counts);
// As allgather_v().
absl::Status shm_allgather(Communicator& comm, const void* input, void* output,
                           std::span<const size_t> bytes);
// As barrier().
absl::Status shm_barrier(Communicator& comm);

}  // namespace troupe::transport::detail
