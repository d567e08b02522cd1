// Recursive halving-doubling allreduce (Rabenseifner; Thakur, Rabenseifner
// and Gropp 2005), for small and medium messages: 2 log2(p) steps instead of
// the ring's 2(n-1), each with a halving (then doubling) share of the data.
//
// With n members and p the largest power of two <= n, the first 2(n - p)
// members pair up: each odd one hands its data to the even one below and
// waits for the result. The p remaining members then reduce-scatter by
// recursive halving (exchange half of the current range with the partner
// at distance p/2, p/4, ..., reduce the half kept) and allgather by
// recursive doubling, and the even members of the pairs pass the result on.
//
// Every element is reduced in an order fixed by the membership: above 16 KiB
// by one member, which then hands it out; up to 16 KiB the partners of each
// step swap whole vectors and both combine them in the same order (one
// exchange instead of two). Either way results are bitwise identical across
// runs and members. Sends copy (the messages are small).
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "transport/collectives/communicator.h"
#include "transport/collectives/detail/steps.h"
#include "transport/collectives/dtype.h"
#include "transport/collectives/reduce.h"

namespace troupe::transport::detail {

// In place over `members`; op is kSum, kMax or kMin. Uses phases `phase`
// to `phase + 3`.
absl::Status halving_doubling_allreduce(Communicator& comm, const Members& members, DType type,
                                        ReduceOp op, void* data, size_t count, uint64_t sequence,
                                        int phase);

}  // namespace troupe::transport::detail
