// Ring algorithms (bandwidth-optimal, as in Baidu's and Gloo's ring): the
// data is cut into one block per member; a reduce-scatter of n-1 steps leaves
// member i with block i reduced over all members, an allgather of n-1 steps
// hands the blocks round. Each step sends to the right neighbour and
// receives from the left. Blocks are cut into segments that are forwarded as
// soon as they are reduced, so a large buffer streams round the ring instead
// of moving a block at a time. Received buffers are reduced in place and
// forwarded without a copy; only the caller's own blocks are sent borrowed.
//
// For a given membership every element is reduced in the same order on every
// run, and handed out from the member that finished it, so results are
// bitwise identical across runs and members.
//
// These run over a subset of a communicator's ranks (detail::Members) so
// that the hierarchical algorithm can use them inside and across hosts.
// Messages are tagged with (sequence, phase, step, segment): an algorithm
// given phase p uses phases p and p + 1.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "transport/collectives/communicator.h"
#include "transport/collectives/detail/steps.h"
#include "transport/collectives/dtype.h"
#include "transport/collectives/reduce.h"

namespace troupe::transport::detail {

// Bytes per segment of a block.
inline constexpr size_t kRingSegmentBytes = 512 * 1024;

// Block i of `count` elements is part_of(count, n, i). `output` (this
// member's block) becomes op (kSum, kMax, kMin) over all members' block
// me. `output` may be input's block me itself. Input blocks other than
// this member's are only read; block me - 1 is sent borrowed through
// `first_sends`, so it must not change until first_sends is drained.
absl::Status ring_reduce_scatter(Communicator& comm, const Members& members, DType type,
                                 ReduceOp op, const void* input, void* output, size_t count,
                                 uint64_t sequence, int phase, BorrowedSends& first_sends);
// The same over blocks of any sizes (in elements; some may be empty):
// block i is `blocks[i]` of input, and `output` receives blocks[me].count
// elements.
absl::Status ring_reduce_scatter_blocks(Communicator& comm, const Members& members, DType type,
                                        ReduceOp op, const void* input, void* output,
                                        std::span<const Range> blocks, uint64_t sequence, int phase,
                                        BorrowedSends& first_sends);

// `data` holds one block per member at `blocks[i]` (byte ranges); this
// member's block is filled in, the others are received. Segments land in
// `data` directly where the transport can place them (Communicator::place)
// and place_allgather() asked for it beforehand (as early as possible: a
// segment that arrives first is copied). Before copying anything into
// `data` it waits for `before_write` (sends that borrowed those bytes).
absl::Status ring_allgather(Communicator& comm, const Members& members, std::byte* data,
                            std::span<const Range> blocks, uint64_t sequence, int phase,
                            BorrowedSends& sends, BorrowedSends* before_write);

// Asks for ring_allgather's incoming segments to land in `data`, through
// buffers borrowed from `sends`. A segment can land before a borrowed send
// of the same bytes is let go only once that send's bytes have been read:
// the segment comes back only after the ring has reduced them.
void place_allgather(Communicator& comm, const Members& members, std::byte* data,
                     std::span<const Range> blocks, uint64_t sequence, int phase,
                     BorrowedSends& sends);

// Reduce-scatter then allgather, in place. Uses phases `phase`, `phase + 1`.
// kAvg is not handled here (the caller sums and scales).
absl::Status ring_allreduce(Communicator& comm, const Members& members, DType type, ReduceOp op,
                            void* data, size_t count, uint64_t sequence, int phase,
                            BorrowedSends& first_sends, BorrowedSends& sends);

}  // namespace troupe::transport::detail
