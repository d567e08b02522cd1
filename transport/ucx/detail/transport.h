// Internal to transport/ucx: the transport (UcxTransport), which owns the
// UCP context and worker and every session on it, and what its files agree
// on about how connections are set up and how frames travel. Its methods
// are spread by concern:
//   transport.cc    the UCP context and worker: creation, shutdown, stats
//   progress.cc     running the worker: the progress thread, driving threads
//   connections.cc  listen and connect, the endpoint exchange, ending sessions
//   send.cc         frames going out
//   receive.cc      frames coming in
// and session.cc has the connection's own side (detail/session.h).
#pragma once

#include <ucp/api/ucp.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "transport/connection.h"
#include "transport/ucx/detail/session.h"

namespace troupe::transport::ucx {

// How a connection is set up. Each ucx connection rides on an authenticated
// tcp connection to the same host:port, the side channel: over it both sides
// send {their connection id, their UCP worker address}, then create UCP
// endpoints to each other's worker (as ucx_perftest does). The side channel
// stays open as the liveness signal: the kernel reports a dead peer on it at
// once, for every UCX lane including shared memory. (UCX's own socket-address
// endpoints, with peer-failure handling, fall back to TCP lanes on one host,
// and fail short sends once shared-memory error handling is enabled.)
//
// How frames travel. Active messages, each one contiguous buffer. A frame of at
// most kInlineFrameBytes goes whole, as its wire bytes, in one eager message
// (kFrameStartAm) behind an 8-byte prefix naming the receiving connection. A
// larger one sends its header and lengths that way, then (kFramePartAm, the
// connection id as AM header) the message and each non-empty buffer: eager
// up to kEagerPartBytes, above that by rendezvous as UCX sees fit (landing
// where DirectIo placement says). UCP delivers an endpoint's active
// messages in order, so the receiver knows which part comes next.
constexpr unsigned kFrameStartAm = 0;
constexpr unsigned kFramePartAm = 1;
constexpr size_t kInlineFrameBytes = 4096;
// Parts up to this size go eagerly, in pieces through the shared-memory FIFO:
// two copies, but no rendezvous handshake, which UCX would start at 8 KiB and
// which costs more than the copy it saves below about this size.
constexpr size_t kEagerPartBytes = 64 * 1024;
constexpr size_t kIdBytes = sizeof(uint64_t);

inline absl::Status ucx_error(std::string_view what, ucs_status_t status) {
  return absl::UnavailableError(absl::StrCat(std::string(what), ": ", ucs_status_string(status)));
}

// Counts an operation that needs the worker run to finish, while it lives.
class InFlight {
 public:
  explicit InFlight(std::atomic<int>& count) : count_(&count) {
    count_->fetch_add(1, std::memory_order_relaxed);
  }
  InFlight(InFlight&& other) noexcept : count_(std::exchange(other.count_, nullptr)) {}
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;
  ~InFlight() {
    if (count_ != nullptr) count_->fetch_sub(1, std::memory_order_relaxed);
  }

 private:
  std::atomic<int>* count_;
};

// An inline frame whose send did not complete at once keeps its bytes here,
// in the UCP request's own space (the context's request_size), until it does.
struct InlineSend {
  std::vector<std::byte> bytes;
  InFlight in_flight;
};

class UcxTransport final : public Transport {
 public:
  static absl::StatusOr<std::unique_ptr<Transport>> create(TransportOptions options) {
    auto t = std::unique_ptr<UcxTransport>(new UcxTransport(std::move(options)));
    if (absl::Status s = t->init(); !s.ok()) return s;
    return std::unique_ptr<Transport>(std::move(t));
  }

  // REQUIRES: not called from one of this transport's callbacks.
  ~UcxTransport() override;

  std::string_view name() const override { return "ucx"; }
  const TransportStats& stats() const override;

  absl::StatusOr<std::unique_ptr<Listener>> listen(std::string_view address,
                                                   AcceptCallback on_accept) override;
  absl::StatusOr<std::shared_ptr<Connection>> connect(std::string_view address,
                                                      ConnectionCallbacks callbacks,
                                                      absl::Duration timeout) override;

  // Runs `fn` on the progress thread. Thread-safe.
  void post(std::function<void()> fn) { enqueue(Command{std::move(fn), nullptr, Frame()}); }
  // Sends `frame` on `s` from the progress thread, in order with post(). Thread-safe.
  void post_send(std::shared_ptr<UcxSession> s, Frame frame) {
    s->queued.fetch_add(1, std::memory_order_relaxed);
    enqueue(Command{nullptr, std::move(s), std::move(frame)});
  }
  // Sends `frame` on `s` from this thread, if it can take the worker at once
  // and no earlier frame of `s` is still queued; otherwise leaves `frame` be
  // and returns false.
  bool try_send_here(UcxSession* s, Frame& frame);

  // A thread driving the worker (see DirectIo).
  void begin_driving() { drivers_.fetch_add(1, std::memory_order_seq_cst); }
  void end_driving(bool blocking);
  bool poll_once();
  // Runs fn() holding the worker lock (waiting for it).
  template <class Fn>
  void with_worker(Fn fn) {
    std::lock_guard<std::mutex> lock(worker_mu_);
    fn();
  }

  // Worker lock holder only: the frame a small incoming frame is laid into,
  // lent to the callbacks and kept, with whatever storage they left in it,
  // for the next one - in place, as moving a frame costs about as much as
  // the rest of its delivery. A callback may run the worker again, so each
  // level of that nesting has a frame of its own (beyond kPooledFrames, a
  // fresh one).
  class InboundFrame {
   public:
    explicit InboundFrame(UcxTransport& t)
        : t_(t), frame_(t.inbound_depth_ < kPooledFrames ? t.inbound_[t.inbound_depth_] : spare_) {
      ++t_.inbound_depth_;
    }
    ~InboundFrame() { --t_.inbound_depth_; }
    InboundFrame(const InboundFrame&) = delete;
    InboundFrame& operator=(const InboundFrame&) = delete;
    Frame& operator*() { return frame_; }

   private:
    UcxTransport& t_;
    Frame spare_;
    Frame& frame_;
  };

  // Worker lock holder only: sends now, or holds the frame until `s` has an endpoint.
  void send_now(UcxSession* s, Frame&& frame);
  void close_now(const std::shared_ptr<UcxSession>& s);
  void drop(const std::shared_ptr<UcxSession>& s, absl::Status why);
  // Forgets `s`, closes its endpoint (flushing queued sends, or not) and its
  // side channel, and reports `why` to the session.
  void end_session(const std::shared_ptr<UcxSession>& s, absl::Status why, bool flush);
  // A session ended at once: the frames it was still sending let go of
  // their buffers (UcxSession::sending).
  void release_sending(UcxSession& s);

 private:
  explicit UcxTransport(TransportOptions options) : options_(std::move(options)) {}

  // What other threads hand the progress thread: a function to run or, when
  // `fn` is empty, a frame to send on `session`.
  struct Command {
    std::function<void()> fn;
    std::shared_ptr<UcxSession> session;
    Frame frame;
  };

  absl::Status init();
  void enqueue(Command command);
  void wake();
  // The progress thread: serve() until stopping_, then shut_down().
  void run();
  void serve();
  void shut_down();
  bool run_commands();
  // The progress thread with nothing to do: blocks until the worker or
  // another thread has something for it, or a while passes.
  void sleep();
  // Sends a frame small enough to travel whole in one eager message.
  void send_inline(UcxSession* s, const FrameHeader& h, const Frame& f);
  // Sends a larger frame: its start, then the message and each buffer.
  void send_parts(UcxSession* s, const FrameHeader& h, Frame f);

  // A new session on an authenticated side channel: registers it and sends
  // our half of the endpoint exchange.
  std::shared_ptr<UcxSession> open_session(Role role, const std::shared_ptr<Connection>& side,
                                           ConnectionCallbacks callbacks, AcceptCallback accept);
  // The side channel's callbacks for session `id`.
  ConnectionCallbacks side_callbacks(std::weak_ptr<UcxSession> session);
  // The peer's half arrived: make the endpoint, flush held frames, start.
  void connect_endpoint(const std::shared_ptr<UcxSession>& s, Frame exchange);

  static ucs_status_t on_frame_start(void* arg, const void* header, size_t header_length,
                                     void* data, size_t length, const ucp_am_recv_param_t* param);
  static ucs_status_t on_frame_part(void* arg, const void* header, size_t header_length, void* data,
                                    size_t length, const ucp_am_recv_param_t* param);
  static void on_ep_error(void* arg, ucp_ep_h ep, ucs_status_t status);
  // Progress thread only: the session with our connection id `id`, or null.
  // Valid until the progress loop next goes round (ended sessions are
  // retired, not destroyed, while callbacks may still be using them).
  UcxSession* session_by_id(uint64_t id);
  void receive_part(const std::shared_ptr<UcxSession>& s,
                    const std::shared_ptr<UcxSession::Incoming>& in, void* data, size_t length,
                    const ucp_am_recv_param_t* param);
  static void part_received(const std::shared_ptr<UcxSession>& s, UcxSession::Incoming* in);

  const TransportOptions options_;
  std::shared_ptr<TransportStats> stats_ = std::make_shared<TransportStats>();
  // The side channel's: refusals and bad frames there count as ours (that is
  // where a peer without the token is turned away), its connections do not.
  std::shared_ptr<TransportStats> side_stats_ = std::make_shared<TransportStats>();
  mutable TransportStats combined_;  // what stats() returns: a fresh snapshot
  std::shared_ptr<Link> link_ = std::make_shared<Link>();
  std::unique_ptr<Transport> side_;  // tcp, for set-up and liveness
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  ucp_address_t* address_ = nullptr;
  size_t address_length_ = 0;
  int worker_fd_ = -1;
  int wake_fd_ = -1;
  std::thread thread_;
  std::atomic<bool> sleeping_{false};
  std::atomic<uint64_t> next_id_{1};
  // Whoever runs the worker holds this: the progress thread, or a thread
  // driving it. Guards what the declarations below say is the holder's.
  std::mutex worker_mu_;
  std::atomic<int> drivers_{0};    // threads driving the worker now
  std::atomic<int> in_flight_{0};  // operations that need the worker run to finish

  std::mutex commands_mu_;
  std::vector<Command> commands_;           // guarded by commands_mu_
  std::atomic<bool> have_commands_{false};  // commands_ is not empty, read without the lock

  std::mutex sessions_mu_;  // by_id_ is filled from other threads
  absl::flat_hash_map<uint64_t, std::shared_ptr<UcxSession>> by_id_;
  bool stopping_ = false;         // progress thread only
  std::vector<Command> running_;  // the batch of commands being run; progress thread only
  // Worker lock holder only.
  absl::flat_hash_map<uint64_t, std::shared_ptr<UcxSession>> known_;  // by_id_'s, lock-free
  uint64_t last_id_ = 0;  // the one found last, in known_ (ids start at 1)
  UcxSession* last_session_ = nullptr;
  absl::flat_hash_map<ucp_ep_h, std::shared_ptr<UcxSession>> by_ep_;
  static constexpr size_t kPooledFrames = 4;
  std::array<Frame, kPooledFrames> inbound_;  // see InboundFrame
  size_t inbound_depth_ = 0;
  std::vector<std::byte> start_;                      // where the next inline frame is laid out
  std::vector<std::shared_ptr<UcxSession>> retired_;  // ended; released between progress calls
};

}  // namespace troupe::transport::ucx
