// Hierarchical allreduce, for ranks spread over several hosts with more
// than one rank per host: the ranks of each host send their data to the
// host's leader (its lowest rank), which reduces them all in one pass (the
// transfers inside a host go over shared memory where the transport has
// it); the leaders allreduce among themselves (ring, or halving-doubling
// for small data); each leader hands the result to its host's ranks. Only
// one copy of the data per host crosses the network.
//
// Deterministic: each leader reduces its host's ranks in rank order, and
// the leaders' algorithm is deterministic for their membership.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "transport/collectives/communicator.h"
#include "transport/collectives/detail/steps.h"
#include "transport/collectives/dtype.h"
#include "transport/collectives/reduce.h"

namespace troupe::transport::detail {

// The ranks of each host, hosts in order of their lowest rank, ranks
// ascending: hosts_of({"a", "b", "a"}) is {{0, 2}, {1}}.
std::vector<std::vector<int>> ranks_by_host(const std::vector<std::string>& hosts);

// In place over all of comm's ranks; op is kSum, kMax or kMin. Uses phases
// `phase` to `phase + 5`.
absl::Status hierarchical_allreduce(Communicator& comm, DType type, ReduceOp op, void* data,
                                    size_t count, uint64_t sequence, int phase,
                                    BorrowedSends& first_sends, BorrowedSends& sends);

}  // namespace troupe::transport::detail
