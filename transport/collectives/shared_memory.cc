#include "transport/collectives/shared_memory.h"

#include <sched.h>

#include <algorithm>
#include <cstring>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "transport/collectives/detail/shared_segment.h"
#include "transport/collectives/detail/steps.h"
#include "transport/collectives/detail/stream_copy.h"
#include "transport/detail/cpu_relax.h"

namespace troupe::transport::detail {
namespace {

using Flag = SharedSegment::Flag;

// Spinning before a wait sleeps: a peer a few microseconds behind is met
// without a system call; one that is far behind (computing, or descheduled on
// a crowded host) costs no more than this much CPU before the waiter sleeps.
constexpr int64_t kSpinNanos = 50'000;
// Checks per round of spinning; between rounds the clock and the group's
// state are looked at, and the CPU is let go now and then.
constexpr int kChecksPerRound = 64;
// How long one sleep lasts at most: the group's failure is noticed within it.
constexpr absl::Duration kSleepSlice = absl::Milliseconds(2);

// One operation's view of the segment: waits on the others' flags, and
// makes a failure the group's.
class Exchange {
 public:
  explicit Exchange(Communicator& comm)
      : comm_(comm), seg_(*comm.shared_segment()), n_(seg_.members()), me_(seg_.me()) {}

  int members() const { return n_; }
  int me() const { return me_; }
  SharedSegment& segment() { return seg_; }

  // OK unless the group has failed already: then nothing of this operation
  // reaches the segment, as nothing of it would reach the transport.
  absl::Status start() const { return comm_.failed(); }

  // Waits until `member`'s flag reaches `count`.
  absl::Status wait(Flag& flag, uint32_t count, int member) {
    if (SharedSegment::reached(flag, count)) return absl::OkStatus();
    const int64_t start = absl::GetCurrentTimeNanos();
    for (int round = 1;; ++round) {
      for (int i = 0; i < kChecksPerRound; ++i) {
        if (SharedSegment::reached(flag, count)) return absl::OkStatus();
        cpu_relax();
      }
      // The rank waited for may share this CPU (as it must on a crowded host).
      if (comm_.crowded() || round % 8 == 0) sched_yield();
      if (absl::Status s = comm_.failed(); !s.ok()) return s;
      const int64_t now = absl::GetCurrentTimeNanos();
      if (now - start < kSpinNanos) continue;
      if (now - start > absl::ToInt64Nanoseconds(comm_.timeout())) {
        return absl::DeadlineExceededError(
            absl::StrCat("rank ", comm_.rank(), " of group ", comm_.group(), ": rank ",
                         rank_of(member), " did not reach the shared-memory collective within ",
                         absl::FormatDuration(comm_.timeout())));
      }
      const uint32_t seen = flag.count.load(std::memory_order_acquire);
      if (static_cast<int32_t>(seen - count) < 0) SharedSegment::sleep_on(flag, seen, kSleepSlice);
    }
  }
  absl::Status wait_arrivals(uint32_t count) {
    for (int m = 0; m < n_; ++m) {
      if (m == me_) continue;
      if (absl::Status s = wait(seg_.arrive(m), count, m); !s.ok()) return s;
    }
    return absl::OkStatus();
  }

  // Each other member read `bytes` of this one's data (Communicator::bytes_sent).
  void count_read_by_others(size_t bytes) {
    comm_.count_shared(static_cast<uint64_t>(n_ - 1) * bytes);
  }

  // The operation's result: a failure is the group's (comm.abort), so that
  // no other member waits for this one.
  absl::Status finish(absl::Status s) {
    if (!s.ok()) comm_.abort(s);
    return s;
  }

 private:
  // Members are the communicator's ranks in order (all on this host).
  int rank_of(int member) const { return member; }

  Communicator& comm_;
  SharedSegment& seg_;
  const int n_;
  const int me_;
};

// dst = op over members in order of their `at` bytes in buffer `which`,
// where dst may be member 0's own bytes there (then reduced in place).
void reduce_members(SharedSegment& seg, uint32_t which, DType type, ReduceOp op, void* dst,
                    size_t at, size_t count) {
  const int n = seg.members();
  const size_t bytes = count * element_size(type);
  std::byte* first = seg.buffer(0, which) + at;
  if (dst != first && bytes > 0) std::memcpy(dst, first, bytes);
  absl::InlinedVector<const void*, 16> srcs;
  for (int m = 1; m < n; ++m)
    srcs.push_back(seg.buffer(m, which) + at);
  reduce_many(type, op, dst, srcs.data(), srcs.size(), count);
}

}  // namespace

absl::Status shm_allreduce(Communicator& comm, DType type, ReduceOp op, void* data, size_t count) {
  Exchange x(comm);
  if (absl::Status s = x.start(); !s.ok()) return s;
  SharedSegment& seg = x.segment();
  const int n = x.members();
  const int me = x.me();
  const size_t width = element_size(type);
  auto* bytes = static_cast<std::byte*>(data);
  if (count * width <= kWholeExchangeBytes) {
    const uint32_t c = seg.next_piece();
    if (count > 0) std::memcpy(seg.buffer(me, c), bytes, count * width);
    SharedSegment::post(seg.arrive(me), c);
    if (absl::Status s = x.wait_arrivals(c); !s.ok()) return x.finish(s);
    reduce_members(seg, c, type, op, bytes, 0, count);
    comm.count_shared(static_cast<uint64_t>(n - 1) * count * width);  // each read all of it
    return absl::OkStatus();
  }
  const size_t piece = SharedSegment::kBufferBytes / width;
  for (size_t offset = 0; offset < count; offset += piece) {
    const size_t elements = std::min(piece, count - offset);
    std::byte* at = bytes + offset * width;
    const uint32_t c = seg.next_piece();
    std::memcpy(seg.buffer(me, c), at, elements * width);
    SharedSegment::post(seg.arrive(me), c);
    if (absl::Status s = x.wait_arrivals(c); !s.ok()) return x.finish(s);
    // This member's part: reduced into member 0's buffer in place, or into
    // the caller's data and then into this member's buffer, for the others.
    const Range mine = part_of(elements, static_cast<size_t>(n), static_cast<size_t>(me));
    const size_t mine_at = mine.offset * width;
    if (me == 0) {
      reduce_members(seg, c, type, op, seg.buffer(0, c) + mine_at, mine_at, mine.count);
      std::memcpy(at + mine_at, seg.buffer(0, c) + mine_at, mine.count * width);
    } else {
      reduce_members(seg, c, type, op, at + mine_at, mine_at, mine.count);
      std::memcpy(seg.buffer(me, c) + mine_at, at + mine_at, mine.count * width);
    }
    SharedSegment::post(seg.done(me), c);
    for (int m = 0; m < n; ++m) {
      if (m == me) continue;
      if (absl::Status s = x.wait(seg.done(m), c, m); !s.ok()) return x.finish(s);
      const Range theirs = part_of(elements, static_cast<size_t>(n), static_cast<size_t>(m));
      std::memcpy(at + theirs.offset * width, seg.buffer(m, c) + theirs.offset * width,
                  theirs.count * width);
    }
    // The others read their parts of this piece, and this rank's part of the result.
    comm.count_shared((elements - mine.count) * width +
                      static_cast<uint64_t>(n - 1) * mine.count * width);
  }
  return absl::OkStatus();
}

absl::Status shm_reduce_scatter(Communicator& comm, DType type, ReduceOp op, const void* input,
                                void* output, std::span<const size_t> counts) {
  Exchange x(comm);
  if (absl::Status s = x.start(); !s.ok()) return s;
  SharedSegment& seg = x.segment();
  const int n = x.members();
  const int me = x.me();
  const size_t width = element_size(type);
  const auto* in = static_cast<const std::byte*>(input);
  absl::InlinedVector<size_t, 16> block_at;  // where each block starts in the input, in bytes
  size_t longest = 0;
  for (size_t at = 0; size_t c : counts) {
    block_at.push_back(at);
    at += c * width;
    longest = std::max(longest, c);
  }
  // Each piece carries the same stretch of every block, side by side.
  const size_t piece = std::max<size_t>(1, SharedSegment::kBufferBytes / (width * n));
  const size_t mine = counts[static_cast<size_t>(me)];
  // The output may be the input's own block: it is read into the buffer
  // before any of it is written.
  for (size_t offset = 0; offset < longest; offset += piece) {
    const uint32_t c = seg.next_piece();
    std::byte* buf = seg.buffer(me, c);
    for (int b = 0; b < n; ++b) {
      const size_t have = counts[static_cast<size_t>(b)];
      if (offset >= have) continue;
      std::memcpy(buf + static_cast<size_t>(b) * piece * width,
                  in + block_at[static_cast<size_t>(b)] + offset * width,
                  std::min(piece, have - offset) * width);
    }
    SharedSegment::post(seg.arrive(me), c);
    if (absl::Status s = x.wait_arrivals(c); !s.ok()) return x.finish(s);
    if (offset < mine) {
      void* dst = static_cast<std::byte*>(output) + offset * width;
      reduce_members(seg, c, type, op, dst, static_cast<size_t>(me) * piece * width,
                     std::min(piece, mine - offset));
    }
  }
  // The others read every block of this rank's input but its own.
  size_t total = 0;
  for (size_t k : counts)
    total += k;
  comm.count_shared((total - mine) * width);
  return absl::OkStatus();
}

namespace {

// Blocks from this size up are read straight from the other ranks' memory
// where the system allows it (SharedSegment::cross_memory): one copy instead
// of two, for a system call and the pinning of the pages read.
constexpr size_t kCrossMemoryBytes = 64 * 1024;

// Every rank offers its input, and reads every other's straight into its
// output; none returns before the others have read its input.
absl::Status cross_memory_allgather(Exchange& x, const std::byte* in, std::byte* out,
                                    std::span<const size_t> bytes,
                                    std::span<const size_t> block_at) {
  SharedSegment& seg = x.segment();
  const int n = x.members();
  const int me = x.me();
  const uint32_t c = seg.next_piece();
  seg.peer(me).source.store(reinterpret_cast<uint64_t>(in), std::memory_order_relaxed);
  SharedSegment::post(seg.arrive(me), c);
  std::byte* own = out + block_at[static_cast<size_t>(me)];
  if (own != in && bytes[static_cast<size_t>(me)] > 0) {
    copy_block(own, in, bytes[static_cast<size_t>(me)]);
  }
  for (int m = 0; m < n; ++m) {
    const size_t theirs = bytes[static_cast<size_t>(m)];
    if (m == me) continue;
    if (absl::Status s = x.wait(seg.arrive(m), c, m); !s.ok()) return x.finish(s);
    if (theirs == 0) continue;
    const uint64_t source = seg.peer(m).source.load(std::memory_order_relaxed);
    if (absl::Status s = seg.read_from(m, source, out + block_at[static_cast<size_t>(m)], theirs);
        !s.ok()) {
      return x.finish(s);
    }
  }
  SharedSegment::post(seg.done(me), c);
  for (int m = 0; m < n; ++m) {
    if (m == me) continue;
    if (absl::Status s = x.wait(seg.done(m), c, m); !s.ok()) return x.finish(s);
  }
  x.count_read_by_others(bytes[static_cast<size_t>(me)]);
  return absl::OkStatus();
}

}  // namespace

absl::Status shm_allgather(Communicator& comm, const void* input, void* output,
                           std::span<const size_t> bytes) {
  Exchange x(comm);
  if (absl::Status s = x.start(); !s.ok()) return s;
  SharedSegment& seg = x.segment();
  const int n = x.members();
  const int me = x.me();
  auto* out = static_cast<std::byte*>(output);
  const auto* in = static_cast<const std::byte*>(input);
  absl::InlinedVector<size_t, 16> block_at;
  size_t longest = 0;
  for (size_t at = 0; size_t b : bytes) {
    block_at.push_back(at);
    at += b;
    longest = std::max(longest, b);
  }
  if (seg.cross_memory() && longest >= kCrossMemoryBytes) {
    return cross_memory_allgather(x, in, out, bytes, block_at);
  }
  const size_t mine = bytes[static_cast<size_t>(me)];
  std::byte* own = out + block_at[static_cast<size_t>(me)];
  constexpr size_t piece = SharedSegment::kBufferBytes;
  for (size_t offset = 0; offset < longest; offset += piece) {
    const uint32_t c = seg.next_piece();
    if (offset < mine) {
      const size_t len = std::min(piece, mine - offset);
      std::memcpy(seg.buffer(me, c), in + offset, len);
      SharedSegment::post(seg.arrive(me), c);
      if (own != in) std::memcpy(own + offset, in + offset, len);
    } else {
      SharedSegment::post(seg.arrive(me), c);
    }
    for (int m = 0; m < n; ++m) {
      if (m == me) continue;
      const size_t theirs = bytes[static_cast<size_t>(m)];
      if (absl::Status s = x.wait(seg.arrive(m), c, m); !s.ok()) return x.finish(s);
      if (offset >= theirs) continue;
      std::memcpy(out + block_at[static_cast<size_t>(m)] + offset, seg.buffer(m, c),
                  std::min(piece, theirs - offset));
    }
  }
  x.count_read_by_others(mine);
  return absl::OkStatus();
}

absl::Status shm_barrier(Communicator& comm) {
  Exchange x(comm);
  if (absl::Status s = x.start(); !s.ok()) return s;
  const uint32_t c = x.segment().next_piece();
  SharedSegment::post(x.segment().arrive(x.me()), c);
  return x.finish(x.wait_arrivals(c));
}

}  // namespace troupe::transport::detail
