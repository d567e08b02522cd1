// A communicator: `size` ranks fully connected over one transport, found
// through a rendezvous Store, exchanging tagged buffers point to point. The
// collective algorithms (ring.h, ...) are written on top of send/recv.
//
// A message is matched by (source rank, tag); messages with the same source
// and tag are received in the order they were sent. abort() - or a peer's
// connection breaking - fails every pending and later recv with Aborted
// (naming the member that aborted or was lost), so no rank is left waiting.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "transport/buffer.h"
#include "transport/collectives/store.h"
#include "transport/connection.h"

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

  // Numbers collective operations: every rank calls it once per operation,
  // in the same order, so the numbers agree across ranks.
  uint64_t next_sequence() { return sequence_++; }

  // Queues `data` for `peer` under `tag`. Errors once aborted.
  absl::Status send(int peer, uint64_t tag, Buffer data);
  // The next buffer from `peer` under `tag`. Errors: Aborted (abort() was
  // called, or a member's connection broke), DeadlineExceeded.
  absl::StatusOr<Buffer> recv(int peer, uint64_t tag);

  // Fails every pending and later operation with Aborted(`why`), here and on
  // every other member it can still reach.
  void abort(const absl::Status& why);

 private:
  // What the transport's callbacks reach; it outlives the communicator for
  // as long as a callback can still run.
  struct Shared {
    std::mutex mu;
    std::condition_variable arrived;
    std::map<std::pair<int, uint64_t>, std::deque<Buffer>> inbox;  // (source, tag)
    std::vector<std::shared_ptr<Connection>> accepted;             // by rank, from hellos
    absl::Status failed;                                           // set once: Aborted
    std::string group;

    void deliver(Frame frame, const std::shared_ptr<Connection>& from);
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
};

}  // namespace troupe::transport
