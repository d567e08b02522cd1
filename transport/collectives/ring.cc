#include "transport/collectives/ring.h"

#include <cstring>
#include <vector>

#include "absl/container/inlined_vector.h"

namespace troupe::transport::detail {
namespace {

// Elements per segment for blocks of up to `largest` elements: at least
// kRingSegmentBytes, and few enough that segment numbers fit their tag bits.
size_t segment_elements(size_t largest, size_t width) {
  size_t elements = std::max<size_t>(kRingSegmentBytes / width, 1);
  constexpr size_t kMaxSegments = 0xffff;
  return std::max(elements, (largest + kMaxSegments - 1) / kMaxSegments);
}

}  // namespace

absl::Status ring_reduce_scatter(Communicator& comm, const Members& members, DType type,
                                 ReduceOp op, const void* input, void* output, size_t count,
                                 uint64_t sequence, int phase, BorrowedSends& first_sends) {
  const int n = members.size();
  absl::InlinedVector<Range, 16> blocks(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i)
    blocks[i] = part_of(count, n, i);
  return ring_reduce_scatter_blocks(comm, members, type, op, input, output, blocks, sequence, phase,
                                    first_sends);
}

absl::Status ring_reduce_scatter_blocks(Communicator& comm, const Members& members, DType type,
                                        ReduceOp op, const void* input, void* output,
                                        std::span<const Range> blocks, uint64_t sequence, int phase,
                                        BorrowedSends& first_sends) {
  const int n = members.size();
  const int m = members.me;
  const size_t width = element_size(type);
  const auto* in_bytes = static_cast<const std::byte*>(input);
  auto* out_bytes = static_cast<std::byte*>(output);
  auto block_of = [&](int i) { return blocks[static_cast<size_t>((i % n + n) % n)]; };
  const Range mine = block_of(m);
  if (n == 1) {
    if (out_bytes != in_bytes + mine.offset * width && mine.count > 0)
      std::memcpy(out_bytes, in_bytes + mine.offset * width, mine.count * width);
    return absl::OkStatus();
  }
  size_t largest = 0;
  for (const Range& b : blocks)
    largest = std::max(largest, b.count);
  const size_t seg = segment_elements(largest, width);
  const int right = members.rank(m + 1);
  const int left = members.rank(m - 1);
  // Step 0 sends this member's copy of block m - 1, as it is.
  const Range first = block_of(m - 1);
  for (size_t at = 0, j = 0; at < first.count; at += seg, ++j) {
    size_t len = std::min(seg, first.count - at);
    Buffer b = first_sends.borrow(in_bytes + (first.offset + at) * width, len * width);
    if (absl::Status s =
            comm.send(right, tag_of(sequence, phase, 0, static_cast<int>(j)), std::move(b));
        !s.ok()) {
      return s;
    }
  }
  // Step s receives block m - s - 2, partly reduced over s + 1 members to the
  // left, adds this member's part, and forwards it: after step n - 2 the
  // block is m itself, reduced over all. In place (`output` is input's block
  // m) the last step adds the received part into `output` rather than the
  // other way round, which saves a copy and is as deterministic.
  const bool in_place = out_bytes == in_bytes + mine.offset * width;
  for (int s = 0; s < n - 1; ++s) {
    const Range block = block_of(m - s - 2);
    const bool last = s == n - 2;
    for (size_t at = 0, j = 0; at < block.count; at += seg, ++j) {
      size_t len = std::min(seg, block.count - at);
      absl::StatusOr<Buffer> in =
          recv_exactly(comm, left, tag_of(sequence, phase, s, static_cast<int>(j)), len * width);
      if (!in.ok()) return in.status();
      if (last && in_place) {
        reduce_into(type, op, out_bytes + at * width, in->data(), len);
        continue;
      }
      // A buffer that borrows the sender's memory (inproc) is not ours to change.
      if (in->borrowed()) *in = Buffer::copy_of(in->bytes());
      reduce_into(type, op, in->data(), in_bytes + (block.offset + at) * width, len);
      if (last) {
        std::memcpy(out_bytes + at * width, in->data(), len * width);
      } else if (absl::Status st = comm.send(
                     right, tag_of(sequence, phase, s + 1, static_cast<int>(j)), *std::move(in));
                 !st.ok()) {
        return st;
      }
    }
  }
  return absl::OkStatus();
}

void place_allgather(Communicator& comm, const Members& members, std::byte* data,
                     std::span<const Range> blocks, uint64_t sequence, int phase,
                     BorrowedSends& sends) {
  const int n = members.size();
  const int m = members.me;
  size_t largest = 0;
  for (const Range& b : blocks)
    largest = std::max(largest, b.count);
  const size_t seg = segment_elements(largest, 1);
  const int left = members.rank(m - 1);
  for (int s = 0; s < n - 1; ++s) {
    const Range& block = blocks[static_cast<size_t>(((m - s - 1) % n + n) % n)];
    for (size_t at = 0, j = 0; at < block.count; at += seg, ++j) {
      size_t len = std::min(seg, block.count - at);
      comm.place(left, tag_of(sequence, phase, s, static_cast<int>(j)),
                 sends.borrow(data + block.offset + at, len));
    }
  }
}

absl::Status ring_allgather(Communicator& comm, const Members& members, std::byte* data,
                            std::span<const Range> blocks, uint64_t sequence, int phase,
                            BorrowedSends& sends, BorrowedSends* before_write) {
  const int n = members.size();
  const int m = members.me;
  if (n == 1) return absl::OkStatus();
  size_t largest = 0;
  for (const Range& b : blocks)
    largest = std::max(largest, b.count);
  const size_t seg = segment_elements(largest, 1);
  const int right = members.rank(m + 1);
  const int left = members.rank(m - 1);
  const Range& mine = blocks[static_cast<size_t>(m)];
  for (size_t at = 0, j = 0; at < mine.count; at += seg, ++j) {
    size_t len = std::min(seg, mine.count - at);
    if (absl::Status s = comm.send(right, tag_of(sequence, phase, 0, static_cast<int>(j)),
                                   sends.borrow(data + mine.offset + at, len));
        !s.ok()) {
      return s;
    }
  }
  // Segments placed in `data` land only after the sends of those bytes were
  // read (see place_allgather); copies wait for the sends to be let go.
  bool may_write = before_write == nullptr;
  // Step s receives block m - s - 1 and forwards it, unless it is the last.
  for (int s = 0; s < n - 1; ++s) {
    const Range& block = blocks[static_cast<size_t>(((m - s - 1) % n + n) % n)];
    for (size_t at = 0, j = 0; at < block.count; at += seg, ++j) {
      size_t len = std::min(seg, block.count - at);
      absl::StatusOr<Buffer> in =
          recv_exactly(comm, left, tag_of(sequence, phase, s, static_cast<int>(j)), len);
      if (!in.ok()) return in.status();
      if (in->data() != data + block.offset + at) {
        if (!may_write) {
          if (absl::Status st = before_write->wait(comm.timeout()); !st.ok()) return st;
          may_write = true;
        }
        std::memcpy(data + block.offset + at, in->data(), len);
      }
      if (s < n - 2) {
        if (absl::Status st = comm.send(right, tag_of(sequence, phase, s + 1, static_cast<int>(j)),
                                        *std::move(in));
            !st.ok()) {
          return st;
        }
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ring_allreduce(Communicator& comm, const Members& members, DType type, ReduceOp op,
                            void* data, size_t count, uint64_t sequence, int phase,
                            BorrowedSends& first_sends, BorrowedSends& sends) {
  const int n = members.size();
  if (n == 1 || count == 0) return absl::OkStatus();
  const size_t width = element_size(type);
  auto* bytes = static_cast<std::byte*>(data);
  const Range mine = part_of(count, n, members.me);
  std::vector<Range> blocks(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    Range r = part_of(count, n, i);
    blocks[i] = {r.offset * width, r.count * width};
  }
  place_allgather(comm, members, bytes, blocks, sequence, phase + 1, sends);
  if (absl::Status s =
          ring_reduce_scatter(comm, members, type, op, data, bytes + mine.offset * width, count,
                              sequence, phase, first_sends);
      !s.ok()) {
    return s;
  }
  return ring_allgather(comm, members, bytes, blocks, sequence, phase + 1, sends, &first_sends);
}

}  // namespace troupe::transport::detail
