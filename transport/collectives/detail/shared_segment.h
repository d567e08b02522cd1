// A shared-memory segment that the ranks of a communicator on one host map
// together, and the flags they signal each other with through it: the
// intra-node path of the collectives (shared_memory.h), as Open MPI's vader
// and NCCL's shared-memory transport give theirs. Each member owns a slot
// of two buffers (one for the piece being exchanged, one for the next) and
// two flags; the flags count pieces, so they only move forward.
//
// Layout: a header line, then per member its two flags on lines of their
// own (arrive, done), then per member a line saying where others may read
// its memory (Peer), then the slots, page aligned.
//
// Made once per communicator (Communicator::create): the member with the
// lowest rank creates it under a random name in /dev/shm, the others map it
// by that name (published in the rendezvous store), and the creator removes
// the name once all have, so nothing is left behind when they exit. The
// pages are reserved up front (posix_fallocate): a full /dev/shm is an error
// at creation, not a SIGBUS in the middle of a collective.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace troupe::transport {
class Store;
}

namespace troupe::transport::detail {

class SharedSegment {
 public:
  // Each member's buffers: two of this many bytes.
  static constexpr size_t kBufferBytes = size_t{1} << 20;

  // A counter that members wait on: the number of pieces its owner has
  // finished a stage of. Waiters that run out of spinning sleep on it (a
  // futex on the shared page, which works across processes).
  struct alignas(64) Flag {
    std::atomic<uint32_t> count{0};
    std::atomic<uint32_t> sleepers{0};
  };

  // What a member offers the others to read straight from its memory (cross-
  // memory attach, process_vm_readv: one copy, as Open MPI's vader reads).
  struct alignas(64) Peer {
    std::atomic<int32_t> pid{0};
    std::atomic<int32_t> can_read{0};  // 1: it read every other member's probe; 2: it could not
    std::atomic<uint64_t> probe{0};    // the address, in its process, of its pid above
    std::atomic<uint64_t> source{0};   // the block it offers in the operation under way
  };

  // Maps the segment of the `members` ranks (ascending; `me` is this rank's
  // index among them) through `store`, under keys that start with `prefix`.
  // Every member must call it; each learns the same outcome. Errors: the
  // system's (no /dev/shm, out of space), or a member that could not map
  // it (named); DeadlineExceeded.
  static absl::StatusOr<std::unique_ptr<SharedSegment>> create(Store& store,
                                                               const std::string& prefix,
                                                               std::span<const int> members, int me,
                                                               absl::Duration timeout);
  ~SharedSegment();
  SharedSegment(const SharedSegment&) = delete;
  SharedSegment& operator=(const SharedSegment&) = delete;

  int members() const { return members_; }
  int me() const { return me_; }
  // The count of this member's next piece: every member numbers the pieces
  // of the collectives it runs here alike, as it calls them in the same order.
  uint32_t next_piece() { return ++pieces_; }

  Flag& arrive(int member) { return flags_[2 * member]; }
  Flag& done(int member) { return flags_[2 * member + 1]; }
  Peer& peer(int member) { return peers_[member]; }
  // Whether every member can read every other's memory (found at creation,
  // the same on every member; not where the system forbids it, as a
  // container's seccomp profile or Yama's ptrace scope may).
  bool cross_memory() const { return cross_memory_; }
  // Reads `bytes` at `address` in member `member`'s process into `to`.
  // Errors: Unavailable with the system's reason (the member is gone).
  absl::Status read_from(int member, uint64_t address, void* to, size_t bytes);

  // Member `member`'s buffer `which` (0 or 1), kBufferBytes long.
  std::byte* buffer(int member, uint32_t which) {
    return slots_ + (static_cast<size_t>(member) * 2 + (which & 1)) * kBufferBytes;
  }

  // Sets `flag` (one of this member's) to `count` and wakes whoever sleeps on it.
  static void post(Flag& flag, uint32_t count);
  // Whether `flag` has reached `count` (counts wrap; within 2^31 of each other).
  static bool reached(const Flag& flag, uint32_t count) {
    return static_cast<int32_t>(flag.count.load(std::memory_order_acquire) - count) >= 0;
  }
  // Sleeps on `flag` until it moves past `seen`, is woken, or `slice` passes.
  static void sleep_on(Flag& flag, uint32_t seen, absl::Duration slice);

 private:
  SharedSegment() = default;
  absl::Status map(int fd, size_t bytes);
  // Once every member has mapped it: publishes this member's pid and probe,
  // reads every other's, and agrees with them on cross_memory().
  absl::Status agree_on_cross_memory(absl::Time deadline);
  // Waits, polling, until every other member's `flag(member)` reaches `count`.
  template <class FlagOf>
  absl::Status wait_all(FlagOf flag, uint32_t count, absl::Time deadline);

  void* base_ = nullptr;
  size_t bytes_ = 0;
  int members_ = 0;
  int me_ = 0;
  uint32_t pieces_ = 0;
  bool cross_memory_ = false;
  Flag* flags_ = nullptr;
  Peer* peers_ = nullptr;
  std::byte* slots_ = nullptr;
};

}  // namespace troupe::transport::detail
