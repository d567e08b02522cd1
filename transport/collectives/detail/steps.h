// Pieces shared by the collective algorithms: who takes part, how messages
// of one operation are tagged, and sends that borrow the caller's memory.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "transport/buffer.h"
#include "transport/collectives/communicator.h"

namespace troupe::transport::detail {

// The ranks an algorithm runs over, in its order (all of a communicator's,
// or a subset: the ranks of one host, the leaders of all hosts), and this
// rank's index among them.
struct Members {
  std::span<const int> ranks;
  int me = 0;

  int size() const { return static_cast<int>(ranks.size()); }
  // The communicator rank of member `i` (taken modulo size()).
  int rank(int i) const {
    int n = size();
    return ranks[static_cast<size_t>(((i % n) + n) % n)];
  }
};

// Tags of one operation: the sequence number (31 bits; tags with the top
// bit set are point-to-point messages), a phase (4 bits:
// parts of an algorithm, e.g. reduce-scatter and allgather), a step (12
// bits) and a segment of a chunk (16 bits).
inline uint64_t tag_of(uint64_t sequence, int phase, int step, int segment = 0) {
  return (sequence & 0x7fffffffu) << 32 | static_cast<uint64_t>(phase & 0xf) << 28 |
         static_cast<uint64_t>(step & 0xfff) << 16 | static_cast<uint64_t>(segment & 0xffff);
}

// Part i of `count` elements cut into `n` nearly equal parts.
struct Range {
  size_t offset = 0;
  size_t count = 0;
};
inline Range part_of(size_t count, size_t n, size_t i) {
  size_t base = count / n;
  size_t extra = count % n;
  return {i * base + std::min(i, extra), base + (i < extra ? 1 : 0)};
}

// The next buffer from `peer` under `tag`, which must be `bytes` long.
absl::StatusOr<Buffer> recv_exactly(Communicator& comm, int peer, uint64_t tag, size_t bytes);

// Sends that borrow the caller's memory instead of copying it. The memory
// must not change, and must stay alive, until the transport lets go of it:
// wait() returns when every buffer made by borrow() has been released (sent,
// consumed, or dropped by a failed connection). Targets for
// Communicator::place are borrowed here too (the transport writes those).
// Given the communicator, a wait drives its transport as recv() does.
class BorrowedSends {
 public:
  BorrowedSends() = default;
  explicit BorrowedSends(Communicator& comm) : comm_(&comm) {}
  BorrowedSends(const BorrowedSends&) = delete;
  BorrowedSends& operator=(const BorrowedSends&) = delete;
  ~BorrowedSends();

  Buffer borrow(const void* data, size_t bytes);
  // Waits until every borrowed buffer is released, or `timeout`:
  // DeadlineExceeded.
  absl::Status wait(absl::Duration timeout);

 private:
  struct State {
    std::mutex mu;
    std::condition_variable released;
    std::atomic<int> outstanding{0};  // changed under mu
  };
  Communicator* comm_ = nullptr;
  std::shared_ptr<State> state_;  // made by the first borrow()
};

// Runs an algorithm's body: on an error, aborts the group (so that no other
// member waits on this one) and then waits for `sends` to be let go, so that
// no transport reads the caller's memory after the operation returns.
absl::Status finish(Communicator& comm, absl::Status status,
                    std::initializer_list<BorrowedSends*> sends);

}  // namespace troupe::transport::detail
