// Ring allreduce (bandwidth-optimal, as in Baidu's and Gloo's ring): the
// buffer is cut into `size` chunks; a reduce-scatter of size-1 steps leaves
// each rank with one fully reduced chunk, an allgather of size-1 steps hands
// the chunks round. Each step sends one chunk to the right neighbour and
// receives one from the left. For a given membership every element is
// reduced in the same order on every run, so results are bitwise identical
// across runs and across ranks.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "transport/collectives/communicator.h"
#include "transport/collectives/dtype.h"
#include "transport/collectives/reduce.h"

namespace troupe::transport {

// Reduces `count` elements of `data` in place across the communicator's
// ranks. `sequence` numbers the operation (the same on every rank, different
// for each collective on this communicator): it keeps operations apart.
// Errors: those of Communicator::recv (Aborted, Unavailable, DeadlineExceeded).
absl::Status ring_allreduce(Communicator& comm, DType type, ReduceOp op, void* data, size_t count,
                            uint64_t sequence);

}  // namespace troupe::transport
