#include "transport/collectives/ring.h"

#include <cstring>
#include <vector>

namespace troupe::transport {
namespace {

// Chunk i of `count` elements cut into `n` nearly equal parts.
struct Chunk {
  size_t offset;
  size_t count;
};

Chunk chunk_of(size_t count, int n, int i) {
  size_t base = count / static_cast<size_t>(n);
  size_t extra = count % static_cast<size_t>(n);
  size_t index = static_cast<size_t>(i);
  size_t offset = index * base + std::min(index, extra);
  return {offset, base + (index < extra ? 1 : 0)};
}

int mod(int a, int n) {
  return ((a % n) + n) % n;
}

uint64_t tag_of(uint64_t sequence, int phase, int step) {
  return (sequence << 16) | (static_cast<uint64_t>(phase) << 12) | static_cast<uint64_t>(step);
}

}  // namespace

absl::Status ring_allreduce(Communicator& comm, DType type, ReduceOp op, void* data, size_t count,
                            uint64_t sequence) {
  const int n = comm.size();
  const int r = comm.rank();
  const size_t width = element_size(type);
  auto* bytes = static_cast<std::byte*>(data);
  if (n > 1 && count > 0) {
    const int right = mod(r + 1, n);
    const int left = mod(r - 1, n);
    auto send_chunk = [&](int i, uint64_t tag) {
      Chunk c = chunk_of(count, n, i);
      return comm.send(right, tag, Buffer::copy_of({bytes + c.offset * width, c.count * width}));
    };
    // Reduce-scatter: after step s, rank r holds chunk (r - s - 1) reduced over s + 2 ranks.
    for (int s = 0; s < n - 1; ++s) {
      uint64_t tag = tag_of(sequence, 0, s);
      if (absl::Status st = send_chunk(mod(r - s, n), tag); !st.ok()) return st;
      absl::StatusOr<Buffer> in = comm.recv(left, tag);
      if (!in.ok()) return in.status();
      Chunk c = chunk_of(count, n, mod(r - s - 1, n));
      if (in->size() != c.count * width) {
        return absl::InternalError("ring allreduce: a chunk of the wrong size arrived");
      }
      reduce_into(type, op, bytes + c.offset * width, in->data(), c.count);
    }
    // Allgather: rank r starts with the reduced chunk (r + 1) and passes chunks on.
    for (int s = 0; s < n - 1; ++s) {
      uint64_t tag = tag_of(sequence, 1, s);
      if (absl::Status st = send_chunk(mod(r + 1 - s, n), tag); !st.ok()) return st;
      absl::StatusOr<Buffer> in = comm.recv(left, tag);
      if (!in.ok()) return in.status();
      Chunk c = chunk_of(count, n, mod(r - s, n));
      if (in->size() != c.count * width) {
        return absl::InternalError("ring allreduce: a chunk of the wrong size arrived");
      }
      std::memcpy(bytes + c.offset * width, in->data(), c.count * width);
    }
  }
  if (op == ReduceOp::kAvg && count > 0) scale(type, data, count, 1.0f / static_cast<float>(n));
  return absl::OkStatus();
}

}  // namespace troupe::transport
