#include "transport/collectives/collectives.h"

#include <string>

#include <cstring>
#include <numeric>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "transport/collectives/detail/steps.h"
#include "transport/collectives/halving_doubling.h"
#include "transport/collectives/hierarchical.h"
#include "transport/collectives/ring.h"
#include "transport/collectives/shared_memory.h"

namespace troupe::transport {
namespace {

// Below this many bytes allreduce takes halving-doubling (fewer steps);
// above, the ring (less data per rank).
constexpr size_t kHalvingDoublingBelowBytes = 64 * 1024;

// Small groups, the common case, need no allocation.
using Ranks = absl::InlinedVector<int, 16>;

absl::Status no_shared_segment(const Communicator& comm, const char* what) {
  return absl::FailedPreconditionError(
      absl::StrCat(what, " over shared memory: group ", comm.group(),
                   " has no shared segment (its ranks are not all on one host, or it could not "
                   "be made)"));
}

Ranks all_ranks(const Communicator& comm) {
  Ranks ranks(static_cast<size_t>(comm.size()));
  std::iota(ranks.begin(), ranks.end(), 0);
  return ranks;
}

}  // namespace

std::string_view to_string(Algorithm algorithm) {
  switch (algorithm) {
    case Algorithm::kAuto:
      return "auto";
    case Algorithm::kRing:
      return "ring";
    case Algorithm::kHalvingDoubling:
      return "halving-doubling";
    case Algorithm::kHierarchical:
      return "hierarchical";
    case Algorithm::kSharedMemory:
      return "shared-memory";
  }
  return "?";
}

absl::StatusOr<Algorithm> parse_algorithm(std::string_view name) {
  for (Algorithm a : {Algorithm::kAuto, Algorithm::kRing, Algorithm::kHalvingDoubling,
                      Algorithm::kHierarchical, Algorithm::kSharedMemory}) {
    if (to_string(a) == name) return a;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown algorithm '", std::string(name),
                   "' (auto, ring, halving-doubling, hierarchical, shared-memory)"));
}

Algorithm choose_algorithm(const Communicator& comm, size_t bytes) {
  if (comm.shared_segment() != nullptr) return Algorithm::kSharedMemory;
  if (comm.size() > 1 && bytes < kHalvingDoublingBelowBytes) return Algorithm::kHalvingDoubling;
  size_t hosts = detail::ranks_by_host(comm.hosts()).size();
  if (hosts > 1 && hosts < static_cast<size_t>(comm.size())) return Algorithm::kHierarchical;
  return Algorithm::kRing;
}

absl::Status allreduce(Communicator& comm, DType type, ReduceOp op, void* data, size_t count,
                       Algorithm algorithm) {
  const uint64_t sequence = comm.next_sequence();
  const ReduceOp base = op == ReduceOp::kAvg ? ReduceOp::kSum : op;
  if (algorithm == Algorithm::kAuto) algorithm = choose_algorithm(comm, count * element_size(type));
  if (algorithm == Algorithm::kSharedMemory) {
    if (comm.shared_segment() == nullptr) return no_shared_segment(comm, "allreduce");
    absl::Status s = detail::shm_allreduce(comm, type, base, data, count);
    if (s.ok() && op == ReduceOp::kAvg && count > 0) {
      scale(type, data, count, 1.0f / static_cast<float>(comm.size()));
    }
    return s;
  }
  Communicator::Driving driving(comm);
  const Ranks ranks = all_ranks(comm);
  const detail::Members members{ranks, comm.rank()};
  detail::BorrowedSends first_sends(comm);
  detail::BorrowedSends sends(comm);
  absl::Status s;
  switch (algorithm) {
    case Algorithm::kAuto:
    case Algorithm::kSharedMemory:  // handled above
    case Algorithm::kRing:
      s = detail::ring_allreduce(comm, members, type, base, data, count, sequence, 0, first_sends,
                                 sends);
      break;
    case Algorithm::kHalvingDoubling:
      s = detail::halving_doubling_allreduce(comm, members, type, base, data, count, sequence, 0);
      break;
    case Algorithm::kHierarchical:
      s = detail::hierarchical_allreduce(comm, type, base, data, count, sequence, 0, first_sends,
                                         sends);
      break;
  }
  s = detail::finish(comm, std::move(s), {&first_sends, &sends});
  if (s.ok() && op == ReduceOp::kAvg && count > 0) {
    scale(type, data, count, 1.0f / static_cast<float>(comm.size()));
  }
  return s;
}

namespace {

absl::Status check_blocks(const Communicator& comm, std::span<const size_t> sizes,
                          const char* what) {
  if (sizes.size() == static_cast<size_t>(comm.size())) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(what, ": ", sizes.size(), " block sizes for a group of ", comm.size()));
}

// Consecutive blocks of the given sizes (elements or bytes, as the sizes are).
absl::InlinedVector<detail::Range, 16> consecutive(std::span<const size_t> sizes) {
  absl::InlinedVector<detail::Range, 16> blocks;
  size_t at = 0;
  for (size_t n : sizes) {
    blocks.push_back({at, n});
    at += n;
  }
  return blocks;
}

}  // namespace

namespace {

absl::Status reduce_scatter_blocks(Communicator& comm, DType type, ReduceOp op, const void* input,
                                   void* output, std::span<const size_t> counts,
                                   Algorithm algorithm) {
  if (absl::Status s = check_blocks(comm, counts, "reduce_scatter_v"); !s.ok()) return s;
  const uint64_t sequence = comm.next_sequence();
  if (algorithm == Algorithm::kAuto && comm.shared_segment() != nullptr) {
    algorithm = Algorithm::kSharedMemory;
  }
  if (algorithm == Algorithm::kSharedMemory) {
    if (comm.shared_segment() == nullptr) return no_shared_segment(comm, "reduce_scatter");
    absl::Status s = detail::shm_reduce_scatter(
        comm, type, op == ReduceOp::kAvg ? ReduceOp::kSum : op, input, output, counts);
    const size_t mine = counts[static_cast<size_t>(comm.rank())];
    if (s.ok() && op == ReduceOp::kAvg && mine > 0) {
      scale(type, output, mine, 1.0f / static_cast<float>(comm.size()));
    }
    return s;
  }
  Communicator::Driving driving(comm);
  const auto blocks = consecutive(counts);
  const Ranks ranks = all_ranks(comm);
  const detail::Members members{ranks, comm.rank()};
  detail::BorrowedSends first_sends(comm);
  absl::Status s = detail::ring_reduce_scatter_blocks(
      comm, members, type, op == ReduceOp::kAvg ? ReduceOp::kSum : op, input, output, blocks,
      sequence, 0, first_sends);
  s = detail::finish(comm, std::move(s), {&first_sends});
  const size_t mine = counts[static_cast<size_t>(comm.rank())];
  if (s.ok() && op == ReduceOp::kAvg && mine > 0) {
    scale(type, output, mine, 1.0f / static_cast<float>(comm.size()));
  }
  return s;
}

}  // namespace

absl::Status reduce_scatter_v(Communicator& comm, DType type, ReduceOp op, const void* input,
                              void* output, std::span<const size_t> counts) {
  return reduce_scatter_blocks(comm, type, op, input, output, counts, Algorithm::kAuto);
}

absl::Status allgather_v(Communicator& comm, const void* input, void* output,
                         std::span<const size_t> bytes) {
  if (absl::Status s = check_blocks(comm, bytes, "allgather_v"); !s.ok()) return s;
  const uint64_t sequence = comm.next_sequence();
  if (comm.shared_segment() != nullptr) return detail::shm_allgather(comm, input, output, bytes);
  Communicator::Driving driving(comm);
  auto* out = static_cast<std::byte*>(output);
  const auto blocks = consecutive(bytes);
  const detail::Range& own = blocks[static_cast<size_t>(comm.rank())];
  std::byte* mine = out + own.offset;
  if (mine != input && own.count > 0) std::memcpy(mine, input, own.count);
  const Ranks ranks = all_ranks(comm);
  detail::BorrowedSends sends(comm);
  const detail::Members members{ranks, comm.rank()};
  detail::place_allgather(comm, members, out, blocks, sequence, 0, sends);
  absl::Status s = detail::ring_allgather(comm, members, out, blocks, sequence, 0, sends, nullptr);
  return detail::finish(comm, std::move(s), {&sends});
}

absl::Status reduce_scatter(Communicator& comm, DType type, ReduceOp op, const void* input,
                            void* output, size_t count, Algorithm algorithm) {
  if (algorithm != Algorithm::kAuto && algorithm != Algorithm::kRing &&
      algorithm != Algorithm::kSharedMemory) {
    return absl::InvalidArgumentError(
        absl::StrCat("reduce_scatter runs the ring or shared-memory algorithm, not ",
                     std::string(to_string(algorithm))));
  }
  const absl::InlinedVector<size_t, 16> counts(static_cast<size_t>(comm.size()), count);
  return reduce_scatter_blocks(comm, type, op, input, output, counts, algorithm);
}

absl::Status allgather(Communicator& comm, const void* input, void* output, size_t bytes) {
  const absl::InlinedVector<size_t, 16> sizes(static_cast<size_t>(comm.size()), bytes);
  return allgather_v(comm, input, output, sizes);
}

absl::Status broadcast(Communicator& comm, void* data, size_t bytes, int root) {
  const uint64_t sequence = comm.next_sequence();
  Communicator::Driving driving(comm);
  const int n = comm.size();
  if (root < 0 || root >= n) {
    return absl::InvalidArgumentError(
        absl::StrCat("broadcast root ", root, " is not a rank of a group of ", n));
  }
  // A binomial tree over ranks renumbered so that the root is 0: rank v
  // receives from v - 2^k (its lowest set bit) and sends to v + 2^j, j < k.
  const int v = (comm.rank() - root + n) % n;
  auto real = [&](int vr) { return (vr + root) % n; };
  detail::BorrowedSends sends(comm);
  absl::Status s;
  int mask = 1;
  for (; mask < n; mask <<= 1) {
    if ((v & mask) != 0) {
      const uint64_t tag = detail::tag_of(sequence, 0, 0);
      comm.place(real(v - mask), tag, sends.borrow(data, bytes));  // land it in `data` directly
      absl::StatusOr<Buffer> in = detail::recv_exactly(comm, real(v - mask), tag, bytes);
      if (!in.ok()) return detail::finish(comm, in.status(), {&sends});
      if (bytes > 0 && in->data() != data) std::memcpy(data, in->data(), bytes);
      break;
    }
  }
  for (mask >>= 1; mask > 0 && s.ok(); mask >>= 1) {
    if (v + mask < n) {
      s = comm.send(real(v + mask), detail::tag_of(sequence, 0, 0), sends.borrow(data, bytes));
    }
  }
  return detail::finish(comm, std::move(s), {&sends});
}

absl::Status barrier(Communicator& comm) {
  const uint64_t sequence = comm.next_sequence();
  if (comm.shared_segment() != nullptr) return detail::shm_barrier(comm);
  Communicator::Driving driving(comm);
  const int n = comm.size();
  const int r = comm.rank();
  // Dissemination: after round k every rank has heard, directly or not,
  // from the 2^(k+1) - 1 ranks before it.
  absl::Status s;
  int step = 0;
  for (int distance = 1; distance < n && s.ok(); distance *= 2, ++step) {
    s = comm.send((r + distance) % n, detail::tag_of(sequence, 0, step), Buffer());
    if (s.ok()) {
      s = comm.recv((r - distance + n) % n, detail::tag_of(sequence, 0, step)).status();
    }
  }
  detail::BorrowedSends none(comm);
  return detail::finish(comm, std::move(s), {&none});
}

}  // namespace troupe::transport
