#include "transport/collectives/halving_doubling.h"

#include <cstring>
#include <vector>

namespace troupe::transport::detail {
namespace {

// Phases, relative to the one the caller gives.
constexpr int kFold = 0;      // odd member of a pair -> even member
constexpr int kHalving = 1;   // recursive halving (reduce-scatter)
constexpr int kDoubling = 2;  // recursive doubling (allgather)
constexpr int kUnfold = 3;    // even member of a pair -> odd member

// Up to this many bytes the p members skip the halving and exchange their
// whole data at every step instead (recursive doubling): log2(p) steps
// rather than 2 log2(p), where each step's latency, not its bytes, is the
// cost. Both partners compute op(lower member's, higher member's), so they
// end each step with the same bits, and every member with the same result.
constexpr size_t kWholeExchangeBytes = 16 * 1024;

}  // namespace

absl::Status halving_doubling_allreduce(Communicator& comm, const Members& members, DType type,
                                        ReduceOp op, void* data, size_t count, uint64_t sequence,
                                        int phase) {
  const int n = members.size();
  const int m = members.me;
  if (n == 1 || count == 0) return absl::OkStatus();
  const size_t width = element_size(type);
  auto* bytes = static_cast<std::byte*>(data);
  auto send_copy = [&](int member, int ph, int step, size_t offset, size_t elements) {
    return comm.send(members.rank(member), tag_of(sequence, phase + ph, step),
                     Buffer::copy_of({bytes + offset * width, elements * width}));
  };
  int p = 1;
  while (p * 2 <= n)
    p *= 2;
  const int paired = 2 * (n - p);  // members 0 .. paired-1 fold in pairs

  if (m < paired && m % 2 == 1) {
    // Hand the data to the even member below and wait for the result.
    if (absl::Status s = send_copy(m - 1, kFold, 0, 0, count); !s.ok()) return s;
    absl::StatusOr<Buffer> in = recv_exactly(comm, members.rank(m - 1),
                                             tag_of(sequence, phase + kUnfold, 0), count * width);
    if (!in.ok()) return in.status();
    std::memcpy(bytes, in->data(), count * width);
    return absl::OkStatus();
  }
  if (m < paired) {
    absl::StatusOr<Buffer> in =
        recv_exactly(comm, members.rank(m + 1), tag_of(sequence, phase + kFold, 0), count * width);
    if (!in.ok()) return in.status();
    reduce_into(type, op, bytes, in->data(), count);
  }
  // v: this member's index among the p that halve and double; member_of
  // maps an index back to a member.
  const int v = m < paired ? m / 2 : m - (n - p);
  auto member_of = [&](int index) { return index < paired / 2 ? index * 2 : index + (n - p); };

  if (count * width <= kWholeExchangeBytes) {
    for (int d = 1, step = 0; d < p; d *= 2, ++step) {
      const int partner = member_of(v ^ d);
      if (absl::Status s = send_copy(partner, kHalving, step, 0, count); !s.ok()) return s;
      absl::StatusOr<Buffer> in = recv_exactly(
          comm, members.rank(partner), tag_of(sequence, phase + kHalving, step), count * width);
      if (!in.ok()) return in.status();
      if ((v & d) == 0) {
        reduce_into(type, op, bytes, in->data(), count);
      } else {
        if (in->borrowed()) *in = Buffer::copy_of(in->bytes());
        reduce_into(type, op, in->data(), bytes, count);
        std::memcpy(bytes, in->data(), count * width);
      }
    }
    if (m < paired) return send_copy(m + 1, kUnfold, 0, 0, count);
    return absl::OkStatus();
  }

  // Recursive halving: at distance d the range splits in two; the lower
  // index keeps the lower half. ranges[k] is the range held before step k.
  std::vector<Range> ranges;
  std::vector<bool> kept_lower;
  Range range{0, count};
  int step = 0;
  for (int d = p / 2; d >= 1; d /= 2, ++step) {
    ranges.push_back(range);
    const int partner = member_of(v ^ d);
    const Range lower{range.offset, range.count / 2};
    const Range upper{range.offset + lower.count, range.count - lower.count};
    const bool keep_lower = (v & d) == 0;
    const Range& give = keep_lower ? upper : lower;
    const Range& keep = keep_lower ? lower : upper;
    if (absl::Status s = send_copy(partner, kHalving, step, give.offset, give.count); !s.ok()) {
      return s;
    }
    absl::StatusOr<Buffer> in = recv_exactly(
        comm, members.rank(partner), tag_of(sequence, phase + kHalving, step), keep.count * width);
    if (!in.ok()) return in.status();
    reduce_into(type, op, bytes + keep.offset * width, in->data(), keep.count);
    range = keep;
    kept_lower.push_back(keep_lower);
  }
  // Recursive doubling: retrace the steps, swapping the finished ranges.
  for (int d = 1; d < p; d *= 2) {
    --step;
    const int partner = member_of(v ^ d);
    const Range& before = ranges[static_cast<size_t>(step)];
    if (absl::Status s = send_copy(partner, kDoubling, step, range.offset, range.count); !s.ok()) {
      return s;
    }
    // The partner holds the rest of `before`.
    const Range theirs = kept_lower[static_cast<size_t>(step)]
                             ? Range{before.offset + range.count, before.count - range.count}
                             : Range{before.offset, before.count - range.count};
    absl::StatusOr<Buffer> in =
        recv_exactly(comm, members.rank(partner), tag_of(sequence, phase + kDoubling, step),
                     theirs.count * width);
    if (!in.ok()) return in.status();
    std::memcpy(bytes + theirs.offset * width, in->data(), theirs.count * width);
    range = before;
  }
  if (m < paired) return send_copy(m + 1, kUnfold, 0, 0, count);
  return absl::OkStatus();
}

}  // namespace troupe::transport::detail
