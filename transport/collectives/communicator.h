// A communicator: `size` ranks fully connected over one transport, found
// through a rendezvous Store, exchanging tagged buffers point to point. The
// collective algorithms (ring.h, ...) are written on top of send/recv.
//
// A message is matched by (source rank, tag); messages with the same source
// and tag are received in the order they were sent. abort() - or a peer's
// connection breaking - fails every pending and later recv with Aborted
// (naming the member that aborted or was lost), so no rank is left waiting.
//
// Waiting. A thread waiting for a message spins a little before it blocks,
// and inside a Driving (each collective operation opens one) it runs the
// transport's I/O itself meanwhile, where the transport allows that (ucx):
// a message then reaches it without a hand-over from the I/O thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "transport/buffer.h"
#include "transport/collectives/detail/shared_segment.h"
#include "transport/collectives/store.h"
#include "transport/connection.h"
#include "transport/direct_io.h"

namespace troupe::transport {

struct CommunicatorOptions {
  int rank = 0;
  int size = 1;
  // Keys in the store are "<group>/<generation>/...": a new generation of a
  // group (after a member was lost) rendezvouses afresh.
  std::string group = "group";
  uint64_t generation = 0;
  // Where this rank listens ("tcp://127.0.0.1:0", "ucx://...", "inproc://name").
  std::string listen_address = "tcp://127.0.0.1:0";
  // The host this rank runs on, for topology-aware algorithms (ranks on one
  // host reduce among themselves first). Empty: this machine's host name.
  std::string host;
  absl::Duration timeout = absl::Seconds(30);  // rendezvous and each recv
  // When every rank runs on one host, the collectives go through a segment
  // of shared memory they map together (shared_memory.h) instead of the
  // transport. False: always the transport (tests of its algorithms).
  bool shared_memory = true;
};

class Communicator {
 public:
  // Listens, publishes its address, and connects to every other rank.
  // Errors: those of the transport; DeadlineExceeded if a rank never shows up.
  static absl::StatusOr<std::unique_ptr<Communicator>> create(Transport& transport, Store& store,
                                                              CommunicatorOptions options);
  ~Communicator();

  int rank() const { return options_.rank; }
  int size() const { return options_.size; }
  absl::Duration timeout() const { return options_.timeout; }
  const std::string& group() const { return options_.group; }
  uint64_t generation() const { return options_.generation; }
  // The host of every rank, by rank.
  const std::vector<std::string>& hosts() const { return hosts_; }
  // The segment every rank maps, when all run on this host and it could be
  // made (CommunicatorOptions::shared_memory); otherwise null. The same on
  // every rank.
  detail::SharedSegment* shared_segment() const { return shared_segment_.get(); }
  // More ranks on this host than CPUs to run them: waits let the CPU go often.
  bool crowded() const { return crowded_; }

  // Numbers collective operations: every rank calls it once per operation,
  // in the same order, so the numbers agree across ranks.
  uint64_t next_sequence() { return sequence_++; }

  // Queues `data` for `peer` under `tag`. Errors once aborted; a peer that
  // cannot be reached aborts the group (Aborted naming it), as a lost member.
  absl::Status send(int peer, uint64_t tag, Buffer data);
  // The next buffer from `peer` under `tag`. Errors: Aborted (abort() was
  // called, or a member's connection broke), DeadlineExceeded.
  absl::StatusOr<Buffer> recv(int peer, uint64_t tag);
  // Payload bytes send() has handed to other ranks so far (not to itself),
  // and what other ranks have read of this rank's data through shared memory
  // (the same bytes a ring would have sent them).
  uint64_t bytes_sent() const { return bytes_sent_.load(std::memory_order_relaxed); }
  // For the shared-memory collectives: `bytes` of this rank's data were read by others.
  void count_shared(uint64_t bytes) { bytes_sent_.fetch_add(bytes, std::memory_order_relaxed); }

  // Asks for the payload of the next message from `peer` under `tag` to land
  // in `target` (a buffer over the caller's memory, of the payload's size),
  // where the transport can place it (ucx, for large payloads): recv() then
  // returns a buffer over target's bytes. Otherwise, or if the message came
  // first, it arrives as usual. clear_placements() lets go of the targets
  // not used; a target used is released with the buffer recv() returns.
  // Nothing is placed while a message from `peer` under `tag` waits in the
  // inbox or another target is placed for it: the next message is not the
  // one the target is for, or another's target comes first.
  void place(int peer, uint64_t tag, Buffer target);
  // Lets go of the target placed for `peer` and `tag` if it is still there
  // and views `target`'s bytes (a message may no longer land in them).
  void unplace(int peer, uint64_t tag, const void* target);
  void clear_placements();

  // Fails every pending and later operation with Aborted(`why`), here and on
  // every other member it can still reach; drops the connections to the
  // `lost` ranks (Connection::abort).
  void abort(const absl::Status& why, const std::vector<int>& lost = {});
  // OK while operations can still complete; once the group was aborted (here
  // or by a member) or lost a member, the Aborted status every operation
  // fails with. A cheap look, for work that would be wasted on a failed group.
  absl::Status failed() const;

  // While one lives, this thread drives the transport's I/O when it waits
  // (see above). Nests; one thread at a time per communicator.
  class Driving {
   public:
    explicit Driving(Communicator& comm);
    ~Driving();
    Driving(const Driving&) = delete;
    Driving& operator=(const Driving&) = delete;

   private:
    Communicator* began_ = nullptr;  // set if this one began driving
  };

  // A wait's spinning phase, before it blocks:
  //   for (Communicator::Spinner spin(comm); !done();)
  //     if (!spin.next()) { Communicator::Blocked b(comm); ...block... }
  // Inside a Driving each next() runs the transport's I/O once, and now and
  // then lets the CPU go (often when this host has more ranks than CPUs);
  // otherwise it lets the CPU go a moment, for the transport's I/O thread.
  // next() gives out after kSpinMicros without any I/O, so that a long wait
  // costs little CPU.
  class Spinner {
   public:
    static constexpr int64_t kSpinMicros = 50;
    explicit Spinner(Communicator& comm);
    bool next();

   private:
    DirectIo* direct_io_;  // null unless this thread drives
    bool crowded_;
    int64_t give_out_ns_ = 0;
    int idle_ = 0;
  };

  // While one lives, the transport's own I/O thread runs its I/O: block
  // inside one (a thread that drives must not block without).
  class Blocked {
   public:
    explicit Blocked(Communicator& comm);
    ~Blocked();
    Blocked(const Blocked&) = delete;
    Blocked& operator=(const Blocked&) = delete;

   private:
    DirectIo* direct_io_;  // set if this thread drives
  };

 private:
  // What the transport's callbacks reach; it outlives the communicator for
  // as long as a callback can still run.
  struct Shared {
    std::mutex mu;
    std::condition_variable arrived;
    // By (source, tag), oldest first; most keys see one message.
    absl::flat_hash_map<std::pair<int, uint64_t>, absl::InlinedVector<Buffer, 1>> inbox;
    // Counts changes to inbox and failed, made under mu: a waiter spins on it.
    std::atomic<uint64_t> arrivals{0};
    absl::flat_hash_map<std::pair<int, uint64_t>, Buffer> placements;  // see place()
    std::vector<std::shared_ptr<Connection>> accepted;                 // by rank, from hellos
    absl::Status failed;                                               // set once: Aborted
    std::string group;

    // Takes the payload it keeps out of the lent frame.
    void deliver(Frame& frame, const std::shared_ptr<Connection>& from);
    // The transport's placement (DirectIo) for a frame's payload.
    Buffer place(std::span<const Buffer> earlier, size_t bytes);
    void lost(int peer, const absl::Status& why);
  };

  explicit Communicator(CommunicatorOptions options) : options_(std::move(options)) {}
  ConnectionCallbacks callbacks(int peer);

  const CommunicatorOptions options_;
  std::shared_ptr<Shared> shared_ = std::make_shared<Shared>();
  std::unique_ptr<Listener> listener_;
  std::vector<std::shared_ptr<Connection>> peers_;  // by rank; null for self
  std::vector<std::string> hosts_;                  // by rank
  uint64_t sequence_ = 0;
  std::atomic<uint64_t> bytes_sent_{0};
  // The connections' transport, if a waiting thread can run its I/O.
  DirectIo* direct_io_ = nullptr;
  bool crowded_ = false;  // more ranks on this host than CPUs to run them
  std::unique_ptr<detail::SharedSegment> shared_segment_;
};

}  // namespace troupe::transport
