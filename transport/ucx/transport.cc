#include "transport/ucx/transport.h"

#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "transport/address.h"
#include "transport/detail/direct_io.h"
#include "transport/detail/session.h"
#include "transport/tcp/transport.h"

namespace troupe::transport::ucx {
namespace {

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
// where detail::DirectIo placement says). UCP delivers an endpoint's active
// messages in order, so the receiver knows which part comes next.
constexpr unsigned kFrameStartAm = 0;
constexpr unsigned kFramePartAm = 1;
constexpr size_t kInlineFrameBytes = 4096;
// Parts up to this size go eagerly, in pieces through the shared-memory FIFO:
// two copies, but no rendezvous handshake, which UCX would start at 8 KiB and
// which costs more than the copy it saves below about this size.
constexpr size_t kEagerPartBytes = 64 * 1024;
constexpr size_t kIdBytes = sizeof(uint64_t);
// Progress calls without events before the thread blocks on the worker's fd
// (tens of microseconds), yielding the core between them. Short, and polite,
// on purpose: a progress thread that spins for milliseconds holds a core that
// the actors answering the frames need - on a 2-core machine it cut
// cross-process call rates 3-6x - while a reply to a frame just sent comes
// back well within the budget.
constexpr int kSpinsBeforeSleep = 500;
constexpr int kSleepMillis = 50;
// While threads drive the worker themselves the progress thread sleeps in
// steps this long: the most that work left to it can wait.
constexpr int kStandBackMillis = 1;

absl::Status ucx_error(std::string_view what, ucs_status_t status) {
  return absl::UnavailableError(absl::StrCat(std::string(what), ": ", ucs_status_string(status)));
}

// Large parts on one host move by a single copy: the receiver reads them out
// of the sender's memory with CMA (process_vm_readv) instead of the sender
// copying them into a shared-memory FIFO and the receiver copying them out.
// UCX 1.13 lets endpoints with peer-failure handling use a memory domain for
// rendezvous only if it can invalidate registered memory, so that a failed
// peer can no longer reach it, and CMA claims that only when told to
// (UCX_CMA_MEMORY_INVALIDATE; its invalidation does nothing). So rendezvous
// is pinned to get_zcopy, where the receiver reads: a peer only ever reads
// memory we send from, never writes ours. (Under the put scheme a peer
// writes into the receiver's buffer, which a failed receive may already have
// handed back.) Both sides of an endpoint must choose alike - UCX aborts the
// process when a peer's lanes differ from ours - so this goes through the
// environment, as the error-handling settings do, and a user's values win:
// with any other scheme CMA stays off.
void enable_single_copy() {
  const char* scheme = std::getenv("UCX_RNDV_SCHEME");
  if (scheme != nullptr && std::string_view(scheme) != "get_zcopy") return;
  ::setenv("UCX_RNDV_SCHEME", "get_zcopy", /*overwrite=*/0);
  ::setenv("UCX_CMA_MEMORY_INVALIDATE", "y", /*overwrite=*/0);
}

// "ucx://h:p" -> "tcp://h:p", the side channel's address.
absl::StatusOr<std::string> side_address(std::string_view address) {
  absl::StatusOr<HostPort> hp = parse_address(address, "ucx");
  if (!hp.ok()) return hp.status();
  return absl::StrCat("tcp://", std::string(address.substr(6)));
}

class UcxTransport;

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

// How sessions reach their transport; cleared when it goes. Sends and
// closes post to it under `mu`. Threads that drive the transport (see
// detail::DirectIo) visit it through `live` instead, lock-free: the
// transport waits for the visitors to leave before it goes.
struct Link {
  std::mutex mu;
  UcxTransport* transport = nullptr;
  std::atomic<UcxTransport*> live{nullptr};
  std::atomic<int> visitors{0};

  // Runs fn(transport) unless the transport is going or gone.
  template <class Fn>
  void visit(Fn fn) {
    visitors.fetch_add(1, std::memory_order_seq_cst);
    if (UcxTransport* t = live.load(std::memory_order_seq_cst)) fn(*t);
    visitors.fetch_sub(1, std::memory_order_seq_cst);
  }
};

// The link whose worker this thread is running now, holding the worker lock
// (the progress thread, or a thread driving it), and whether it is a thread
// driving it rather than the progress thread.
thread_local const Link* tls_running = nullptr;
thread_local bool tls_driving = false;

class UcxSession final : public detail::Session, public detail::DirectIo {
 public:
  UcxSession(Role role, const TransportOptions& options, std::shared_ptr<TransportStats> stats,
             std::string name, std::shared_ptr<Link> link, uint64_t id)
      : Session(role, options, std::move(stats), std::move(name)), id(id), link_(std::move(link)) {}

  const uint64_t id;
  std::shared_ptr<Connection> side;  // the side channel; set once, before use
  // Frames posted to the progress thread and not yet sent: a send from
  // another thread may go straight out only when there are none.
  std::atomic<int> queued{0};
  // Whether callbacks may run on a thread driving the transport.
  std::atomic<bool> driving_allowed{false};

  // Worker lock holder only.
  ucp_ep_h ep = nullptr;
  uint64_t peer_id = 0;
  bool gone = false;        // dropped; ignore further traffic
  std::vector<Frame> held;  // frames sent before the endpoint existed

  // Frames whose bytes are still arriving, in the order they were sent: a
  // small frame behind a large rendezvous one waits for it.
  struct Incoming {
    struct Part {
      int buffer;  // which of frame.buffers, or kMessage
      size_t bytes;
    };
    static constexpr int kMessage = -1;
    Frame frame;  // buffers still to arrive are empty until they do
    std::vector<Part> parts;
    size_t next_part = 0;   // parts announced so far
    size_t parts_done = 0;  // parts fully received
    bool complete = false;
  };
  std::deque<std::unique_ptr<Incoming>> incoming;
  detail::DirectIo::Placement placement;  // set under the worker lock

  // Where the part about to arrive lands: the frame's message, or a buffer
  // that placement chooses or the transport allocates.
  std::byte* land(Incoming& in, const Incoming::Part& part) {
    if (part.buffer == Incoming::kMessage) return in.frame.message.data();
    Buffer& b = in.frame.buffers[static_cast<size_t>(part.buffer)];
    // Placement sees only complete buffers before this one.
    if (placement && in.parts_done + 1 == in.next_part) {
      b = placement({in.frame.buffers.data(), static_cast<size_t>(part.buffer)}, part.bytes);
      if (b.size() != part.bytes) b = Buffer();
    }
    if (b.empty()) b = Buffer(part.bytes);
    return b.data();
  }

  // What the session's callbacks are told, from whichever thread runs the
  // worker - or, on a driving thread that the session has not allowed, in
  // order through the progress thread (see `deferred`).
  void hand_up_frame(Frame frame) {
    if (may_hand_up_here()) {
      on_frame_received(std::move(frame));
    } else {
      defer({Event::kFrame, std::move(frame), absl::OkStatus()});
    }
  }
  void hand_up_bad_frame(absl::Status why) {
    if (may_hand_up_here()) {
      on_bad_frame(why);
    } else {
      defer({Event::kBadFrame, Frame(), std::move(why)});
    }
  }
  void hand_up_closed(absl::Status why) {
    if (may_hand_up_here()) {
      on_channel_closed(std::move(why));
    } else {
      defer({Event::kClosed, Frame(), std::move(why)});
    }
  }
  // Progress thread: hands up what was deferred.
  void flush_deferred();

  // detail::DirectIo.
  void allow_driving() override { driving_allowed.store(true, std::memory_order_release); }
  void begin_driving() override;
  void end_driving(bool blocking) override;
  bool poll() override;
  void set_placement(Placement place) override;

  void deliver_completed() {
    while (!incoming.empty() && incoming.front()->complete) {
      Frame f = std::move(incoming.front()->frame);
      incoming.pop_front();
      if (absl::Status s = validate_message(f.message, options().limits); !s.ok()) {
        hand_up_bad_frame(s);
        incoming.clear();
        return;
      }
      hand_up_frame(std::move(f));
    }
  }

 protected:
  absl::Status write_frame(Frame frame) override;
  void shutdown_channel() override;

 private:
  struct Event {
    enum Kind { kFrame, kBadFrame, kClosed } kind;
    Frame frame;
    absl::Status status;
  };

  bool may_hand_up_here() {
    if (!tls_driving) {
      if (!deferred_.empty()) flush_deferred();  // the progress thread: what waited goes first
      return true;
    }
    return deferred_.empty() && driving_allowed.load(std::memory_order_acquire);
  }
  void defer(Event event);

  std::shared_ptr<Link> link_;
  std::deque<Event> deferred_;  // worker lock holder only
  bool flush_posted_ = false;   // worker lock holder only
};

class UcxTransport final : public Transport {
 public:
  static absl::StatusOr<std::unique_ptr<Transport>> create(TransportOptions options) {
    auto t = std::unique_ptr<UcxTransport>(new UcxTransport(std::move(options)));
    if (absl::Status s = t->init(); !s.ok()) return s;
    return std::unique_ptr<Transport>(std::move(t));
  }

  // REQUIRES: not called from one of this transport's callbacks.
  ~UcxTransport() override {
    {
      std::lock_guard<std::mutex> lock(link_->mu);
      link_->transport = nullptr;
    }
    link_->live.store(nullptr, std::memory_order_seq_cst);
    while (link_->visitors.load(std::memory_order_seq_cst) > 0)
      std::this_thread::yield();
    side_.reset();  // side channels close; their callbacks post nothing any more
    if (thread_.joinable()) {
      post([this] { stopping_ = true; });
      thread_.join();
    }
    if (address_ != nullptr) ucp_worker_release_address(worker_, address_);
    if (worker_ != nullptr) ucp_worker_destroy(worker_);
    if (context_ != nullptr) ucp_cleanup(context_);
    if (wake_fd_ >= 0) ::close(wake_fd_);
  }

  std::string_view name() const override { return "ucx"; }
  const TransportStats& stats() const override {
    auto sum = [](const std::atomic<uint64_t>& a, const std::atomic<uint64_t>& b) {
      return a.load(std::memory_order_relaxed) + b.load(std::memory_order_relaxed);
    };
    combined_.connections_accepted.store(stats_->connections_accepted.load());
    combined_.connections_refused.store(
        sum(stats_->connections_refused, side_stats_->connections_refused));
    combined_.bad_frames.store(sum(stats_->bad_frames, side_stats_->bad_frames));
    combined_.frames_sent.store(stats_->frames_sent.load());
    combined_.frames_received.store(stats_->frames_received.load());
    return combined_;
  }

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

  // A thread driving the worker (see detail::DirectIo).
  void begin_driving() { drivers_.fetch_add(1, std::memory_order_seq_cst); }
  void end_driving(bool blocking);
  bool poll_once();
  // Runs fn() holding the worker lock (waiting for it).
  template <class Fn>
  void with_worker(Fn fn) {
    std::lock_guard<std::mutex> lock(worker_mu_);
    fn();
  }

  // Worker lock holder only: sends now, or holds the frame until `s` has an endpoint.
  void send_now(UcxSession* s, Frame frame);
  void close_now(const std::shared_ptr<UcxSession>& s);
  void drop(const std::shared_ptr<UcxSession>& s, absl::Status why);
  // Forgets `s`, closes its endpoint (flushing queued sends, or not) and its
  // side channel, and reports `why` to the session.
  void end_session(const std::shared_ptr<UcxSession>& s, absl::Status why, bool flush);

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
  void run();
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
  void receive_part(const std::shared_ptr<UcxSession>& s, UcxSession::Incoming* in, void* data,
                    size_t length, const ucp_am_recv_param_t* param);
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
  absl::flat_hash_map<ucp_ep_h, std::shared_ptr<UcxSession>> by_ep_;
  std::vector<std::byte> start_;                      // where the next inline frame is laid out
  std::vector<std::shared_ptr<UcxSession>> retired_;  // ended; released between progress calls
};

absl::Status UcxSession::write_frame(Frame frame) {
  if (tls_running == link_.get()) {
    // A reply from a callback, or a thread driving the worker: no hand-off.
    // (Once the transport is going, sends fail below.)
    if (UcxTransport* t = link_->live.load(std::memory_order_acquire)) {
      t->send_now(this, std::move(frame));
      return absl::OkStatus();
    }
  }
  if (driving_allowed.load(std::memory_order_acquire)) {
    // A communicator's thread: send from here when the worker is free.
    bool sent = false;
    link_->visit([&](UcxTransport& t) { sent = t.try_send_here(this, frame); });
    if (sent) return absl::OkStatus();
  }
  std::lock_guard<std::mutex> lock(link_->mu);
  if (link_->transport == nullptr) return absl::UnavailableError("the ucx transport has shut down");
  link_->transport->post_send(std::static_pointer_cast<UcxSession>(shared_from_this()),
                              std::move(frame));
  return absl::OkStatus();
}

void UcxSession::shutdown_channel() {
  std::lock_guard<std::mutex> lock(link_->mu);
  if (link_->transport == nullptr) return;
  auto self = std::static_pointer_cast<UcxSession>(shared_from_this());
  UcxTransport* t = link_->transport;
  t->post([t, self] { t->close_now(self); });
}

class UcxListener final : public Listener {
 public:
  UcxListener(std::unique_ptr<Listener> side, std::string address)
      : side_(std::move(side)), address_(std::move(address)) {}
  std::string address() const override { return address_; }
  void close() override { side_->close(); }

 private:
  std::unique_ptr<Listener> side_;
  std::string address_;
};

absl::Status UcxTransport::init() {
  // Endpoints ask for peer-failure reports; UCX's shared-memory transports
  // offer them only when told to, through the environment. A user's value
  // wins. Once per process: setenv must not race another thread's getenv.
  static std::once_flag environment_set;
  std::call_once(environment_set, [] {
    ::setenv("UCX_POSIX_ERROR_HANDLING", "y", /*overwrite=*/0);
    ::setenv("UCX_SYSV_ERROR_HANDLING", "y", /*overwrite=*/0);
    enable_single_copy();
  });
  side_ = tcp::make_transport(options_, side_stats_);

  ucp_config_t* config = nullptr;
  if (ucs_status_t s = ucp_config_read(nullptr, nullptr, &config); s != UCS_OK) {
    return ucx_error("ucp_config_read", s);
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_REQUEST_SIZE;
  params.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
  params.request_size = sizeof(InlineSend);
  ucs_status_t s = ucp_init(&params, config, &context_);
  ucp_config_release(config);
  if (s != UCS_OK) return ucx_error("ucp_init", s);

  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SINGLE;
  if (s = ucp_worker_create(context_, &wp, &worker_); s != UCS_OK) {
    return ucx_error("ucp_worker_create", s);
  }
  if (s = ucp_worker_get_address(worker_, &address_, &address_length_); s != UCS_OK) {
    return ucx_error("ucp_worker_get_address", s);
  }
  if (s = ucp_worker_get_efd(worker_, &worker_fd_); s != UCS_OK) {
    return ucx_error("ucp_worker_get_efd", s);
  }
  for (auto [id, cb] : {std::pair{kFrameStartAm, &UcxTransport::on_frame_start},
                        std::pair{kFramePartAm, &UcxTransport::on_frame_part}}) {
    ucp_am_handler_param_t hp{};
    hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                    UCP_AM_HANDLER_PARAM_FIELD_ARG;
    hp.id = id;
    hp.cb = cb;
    hp.arg = this;
    if (s = ucp_worker_set_am_recv_handler(worker_, &hp); s != UCS_OK) {
      return ucx_error("ucp_worker_set_am_recv_handler", s);
    }
  }
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) return absl::InternalError("eventfd failed");
  {
    std::lock_guard<std::mutex> lock(link_->mu);
    link_->transport = this;
  }
  link_->live.store(this, std::memory_order_seq_cst);
  thread_ = std::thread([this] { run(); });
  return absl::OkStatus();
}

void UcxTransport::enqueue(Command command) {
  {
    std::lock_guard<std::mutex> lock(commands_mu_);
    commands_.push_back(std::move(command));
    have_commands_.store(true, std::memory_order_seq_cst);
  }
  wake();
}

void UcxTransport::wake() {
  uint64_t one = 1;
  if (sleeping_.load(std::memory_order_seq_cst)) static_cast<void>(::write(wake_fd_, &one, 8));
}

bool UcxTransport::run_commands() {
  if (!have_commands_.load(std::memory_order_acquire)) return false;
  {
    std::lock_guard<std::mutex> lock(commands_mu_);
    running_.swap(commands_);
    have_commands_.store(false, std::memory_order_relaxed);
  }
  for (Command& c : running_) {
    if (c.fn) {
      c.fn();
    } else {
      send_now(c.session.get(), std::move(c.frame));
      c.session->queued.fetch_sub(1, std::memory_order_release);
    }
  }
  running_.clear();
  return true;
}

// Marks this thread as running `link`'s worker while it holds the worker lock.
class Running {
 public:
  Running(const Link* link, bool driving) {
    tls_running = link;
    tls_driving = driving;
  }
  ~Running() {
    tls_running = nullptr;
    tls_driving = false;
  }
  Running(const Running&) = delete;
  Running& operator=(const Running&) = delete;
};

void UcxTransport::run() {
  int idle = 0;
  while (!stopping_) {
    bool busy = false;
    {
      std::lock_guard<std::mutex> lock(worker_mu_);
      Running running(link_.get(), /*driving=*/false);
      busy = run_commands();
      if (drivers_.load(std::memory_order_seq_cst) == 0) {
        while (ucp_worker_progress(worker_) != 0)
          busy = true;
      } else {
        // Threads driving the worker run it. Once per wake-up (a command, or
        // kStandBackMillis) this one does too, for connections that no
        // thread drives.
        ucp_worker_progress(worker_);
      }
      if (!retired_.empty()) retired_.clear();
    }
    if (busy) {
      idle = 0;
      continue;
    }
    if (drivers_.load(std::memory_order_seq_cst) == 0 && ++idle < kSpinsBeforeSleep) {
      sched_yield();  // any other thread of ours that can run goes first
      continue;
    }
    idle = 0;
    sleep();
  }
  // Shutting down: every connection ends now.
  std::vector<std::shared_ptr<UcxSession>> sessions;
  {
    std::lock_guard<std::mutex> lock(sessions_mu_);
    for (auto& [id, s] : by_id_)
      sessions.push_back(s);
  }
  for (auto& s : sessions)
    drop(s, absl::UnavailableError("the transport is shutting down"));
  // Let closes and sends still in flight finish (bounded) before the worker goes.
  absl::Time until = absl::Now() + absl::Milliseconds(200);
  for (int quiet = 0; quiet < 1000 && absl::Now() < until;) {
    quiet = ucp_worker_progress(worker_) != 0 ? 0 : quiet + 1;
  }
}

void UcxTransport::sleep() {
  sleeping_.store(true, std::memory_order_seq_cst);
  if (!have_commands_.load(std::memory_order_seq_cst)) {
    if (drivers_.load(std::memory_order_seq_cst) > 0) {
      // Standing back: the drivers see to the worker, and the last to leave
      // wakes this thread if anything is left for it.
      pollfd fd = {wake_fd_, POLLIN, 0};
      ::poll(&fd, 1, kStandBackMillis);
    } else {
      bool armed = false;
      {
        std::lock_guard<std::mutex> lock(worker_mu_);
        armed = ucp_worker_arm(worker_) == UCS_OK;
      }
      if (armed) {
        pollfd fds[2] = {{worker_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
        ::poll(fds, 2, kSleepMillis);
      }
    }
    uint64_t drained;
    while (::read(wake_fd_, &drained, 8) == 8) {
    }
  }
  sleeping_.store(false, std::memory_order_seq_cst);
}

void UcxTransport::end_driving(bool blocking) {
  if (drivers_.fetch_sub(1, std::memory_order_seq_cst) == 1 &&
      (blocking || in_flight_.load(std::memory_order_seq_cst) > 0 ||
       have_commands_.load(std::memory_order_seq_cst))) {
    wake();
  }
}

bool UcxTransport::poll_once() {
  std::unique_lock<std::mutex> lock(worker_mu_, std::try_to_lock);
  if (!lock.owns_lock()) return false;
  Running running(link_.get(), /*driving=*/true);
  bool any = ucp_worker_progress(worker_) != 0;
  if (!retired_.empty()) retired_.clear();
  return any;
}

bool UcxTransport::try_send_here(UcxSession* s, Frame& frame) {
  std::unique_lock<std::mutex> lock(worker_mu_, std::try_to_lock);
  if (!lock.owns_lock() || s->queued.load(std::memory_order_acquire) > 0) return false;
  Running running(link_.get(), /*driving=*/true);
  send_now(s, std::move(frame));
  if (!retired_.empty()) retired_.clear();
  return true;
}

// Only on a driving thread, so the transport is alive (it is being visited).
void UcxSession::defer(Event event) {
  deferred_.push_back(std::move(event));
  if (flush_posted_) return;
  flush_posted_ = true;
  auto self = std::static_pointer_cast<UcxSession>(shared_from_this());
  link_->live.load(std::memory_order_relaxed)->post([self] { self->flush_deferred(); });
}

void UcxSession::flush_deferred() {
  flush_posted_ = false;
  while (!deferred_.empty()) {
    Event e = std::move(deferred_.front());
    deferred_.pop_front();
    switch (e.kind) {
      case Event::kFrame:
        on_frame_received(std::move(e.frame));
        break;
      case Event::kBadFrame:
        on_bad_frame(e.status);
        break;
      case Event::kClosed:
        on_channel_closed(std::move(e.status));
        break;
    }
  }
}

// A driving thread stays a visitor from begin_driving() to end_driving(), so
// that poll() in between need not check in each time.
void UcxSession::begin_driving() {
  link_->visitors.fetch_add(1, std::memory_order_seq_cst);
  if (UcxTransport* t = link_->live.load(std::memory_order_seq_cst)) t->begin_driving();
}

void UcxSession::end_driving(bool blocking) {
  if (UcxTransport* t = link_->live.load(std::memory_order_seq_cst)) t->end_driving(blocking);
  link_->visitors.fetch_sub(1, std::memory_order_seq_cst);
}

void UcxSession::set_placement(Placement place) {
  link_->visit([&](UcxTransport& t) { t.with_worker([&] { placement = std::move(place); }); });
}

bool UcxSession::poll() {
  UcxTransport* t = link_->live.load(std::memory_order_acquire);
  return t != nullptr && t->poll_once();
}

UcxSession* UcxTransport::session_by_id(uint64_t id) {
  if (auto it = known_.find(id); it != known_.end()) return it->second.get();
  std::lock_guard<std::mutex> lock(sessions_mu_);
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return nullptr;
  known_.emplace(id, it->second);
  return it->second.get();
}

ConnectionCallbacks UcxTransport::side_callbacks(std::weak_ptr<UcxSession> session) {
  return ConnectionCallbacks{[this, session](Frame f) {
                               auto s = session.lock();
                               if (!s) return;
                               auto frame = std::make_shared<Frame>(std::move(f));
                               std::lock_guard<std::mutex> lock(link_->mu);
                               if (link_->transport != nullptr)
                                 post([this, s, frame] { connect_endpoint(s, std::move(*frame)); });
                             },
                             [this, session](absl::Status why) {
                               auto s = session.lock();
                               // An orderly close of the side channel follows the peer's Close
                               // frame over UCX, which may still be on its way: let that frame end
                               // the connection. Anything else means the peer is gone.
                               if (!s || why.ok()) return;
                               absl::Status lost =
                                   absl::UnavailableError("the peer's process went away");
                               std::lock_guard<std::mutex> lock(link_->mu);
                               if (link_->transport != nullptr)
                                 post([this, s, lost] { drop(s, lost); });
                             }};
}

std::shared_ptr<UcxSession> UcxTransport::open_session(Role role,
                                                       const std::shared_ptr<Connection>& side,
                                                       ConnectionCallbacks callbacks,
                                                       AcceptCallback accept) {
  uint64_t id = next_id_.fetch_add(1);
  auto s =
      std::make_shared<UcxSession>(role, options_, stats_, "ucx " + side->peer_name(), link_, id);
  s->side = side;
  if (role == Role::kClient) {
    s->set_callbacks(std::move(callbacks));
  } else {
    s->set_accept(std::move(accept));
  }
  {
    std::lock_guard<std::mutex> lock(sessions_mu_);
    by_id_[id] = s;
  }
  // Our half of the exchange: {our connection id, our worker address}.
  Frame hello;
  hello.buffers.emplace_back(kIdBytes);
  std::memcpy(hello.buffers.back().data(), &id, kIdBytes);
  hello.buffers.push_back(
      Buffer::copy_of({reinterpret_cast<const std::byte*>(address_), address_length_}));
  static_cast<void>(side->send(std::move(hello)));
  return s;
}

void UcxTransport::connect_endpoint(const std::shared_ptr<UcxSession>& s, Frame exchange) {
  if (s->gone || s->ep != nullptr) return;
  if (exchange.buffers.size() != 2 || exchange.buffers[0].size() != kIdBytes ||
      exchange.buffers[1].empty()) {
    drop(s, absl::InvalidArgumentError("malformed endpoint exchange on the side channel"));
    return;
  }
  std::memcpy(&s->peer_id, exchange.buffers[0].data(), kIdBytes);
  ucp_ep_params_t ep{};
  ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLER |
                  UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  ep.address = reinterpret_cast<const ucp_address_t*>(exchange.buffers[1].data());
  ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  ep.err_handler.cb = &UcxTransport::on_ep_error;
  ep.err_handler.arg = this;
  if (ucs_status_t st = ucp_ep_create(worker_, &ep, &s->ep); st != UCS_OK) {
    s->ep = nullptr;
    drop(s, ucx_error("ucp_ep_create", st));
    return;
  }
  by_ep_[s->ep] = s;
  // Our Hello goes first: frames held so far answer the peer's (its Proof).
  s->start();
  for (Frame& f : std::exchange(s->held, {}))
    send_now(s.get(), std::move(f));
}

// A larger frame's sends; freed when the last of its active messages completes.
struct SendOp {
  Frame frame;
  std::vector<std::byte> start;  // receiver id, header, lengths
  uint64_t to = 0;               // receiver id, the AM header of parts
  int pending = 0;
  InFlight in_flight;
};

template <class T>
void append(std::vector<std::byte>& out, const T& value) {
  const auto* p = reinterpret_cast<const std::byte*>(&value);
  out.insert(out.end(), p, p + sizeof(T));
}

// The receiver id, header and lengths table that start every frame.
void append_start(std::vector<std::byte>& out, uint64_t to, const FrameHeader& h, const Frame& f) {
  append(out, to);
  append(out, encode_header(h));
  for (const Buffer& b : f.buffers)
    append(out, uint64_t{b.size()});
}

void UcxTransport::send_now(UcxSession* s, Frame frame) {
  if (s->gone) return;
  if (s->ep == nullptr) {
    s->held.push_back(std::move(frame));  // the endpoint exchange is still on its way
    return;
  }
  FrameHeader h = header_of(frame);
  if (h.total_bytes() <= kInlineFrameBytes) {
    send_inline(s, h, frame);
  } else {
    send_parts(s, h, std::move(frame));
  }
}

void UcxTransport::send_inline(UcxSession* s, const FrameHeader& h, const Frame& f) {
  start_.resize(kIdBytes + h.total_bytes());
  std::byte* at = start_.data();
  auto put = [&at](const void* p, size_t n) {
    if (n > 0) std::memcpy(at, p, n);
    at += n;
  };
  put(&s->peer_id, kIdBytes);
  put(encode_header(h).data(), kFrameHeaderBytes);
  for (const Buffer& b : f.buffers) {
    uint64_t len = b.size();
    put(&len, sizeof(len));
  }
  put(f.message.data(), f.message.size());
  for (const Buffer& b : f.buffers)
    put(b.data(), b.size());
  ucp_request_param_t param{};
  param.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = UCP_AM_SEND_FLAG_EAGER;
  param.datatype = ucp_dt_make_contig(1);
  param.cb.send = [](void* request, ucs_status_t, void*) {
    static_cast<InlineSend*>(request)->~InlineSend();
    ucp_request_free(request);
  };
  ucs_status_ptr_t req =
      ucp_am_send_nbx(s->ep, kFrameStartAm, nullptr, 0, start_.data(), start_.size(), &param);
  if (req == nullptr) return;  // sent (the usual case): the bytes are UCX's now
  if (UCS_PTR_IS_ERR(req)) {
    drop(std::static_pointer_cast<UcxSession>(s->shared_from_this()),
         ucx_error("ucp_am_send_nbx", UCS_PTR_STATUS(req)));
    return;
  }
  // In flight: the request keeps the bytes; the callback runs later, on this thread.
  new (req) InlineSend{std::exchange(start_, {}), InFlight(in_flight_)};
}

void UcxTransport::send_parts(UcxSession* s, const FrameHeader& h, Frame f) {
  auto* op = new SendOp{std::move(f), {}, s->peer_id, 1, InFlight(in_flight_)};  // 1: the guard
  append_start(op->start, op->to, h, op->frame);
  std::vector<std::pair<void*, size_t>> parts;
  if (!op->frame.message.empty())
    parts.emplace_back(op->frame.message.data(), op->frame.message.size());
  for (Buffer& b : op->frame.buffers) {
    if (!b.empty()) parts.emplace_back(b.data(), b.size());
  }
  for (size_t i = 0; i <= parts.size(); ++i) {
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                         UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = i == 0 || parts[i - 1].second <= kEagerPartBytes ? UCP_AM_SEND_FLAG_EAGER : 0;
    param.datatype = ucp_dt_make_contig(1);
    param.user_data = op;
    param.cb.send = [](void* request, ucs_status_t, void* user) {
      auto* o = static_cast<SendOp*>(user);
      if (--o->pending == 0) delete o;
      ucp_request_free(request);
    };
    ++op->pending;
    ucs_status_ptr_t req = i == 0
                               ? ucp_am_send_nbx(s->ep, kFrameStartAm, nullptr, 0, op->start.data(),
                                                 op->start.size(), &param)
                               : ucp_am_send_nbx(s->ep, kFramePartAm, &op->to, kIdBytes,
                                                 parts[i - 1].first, parts[i - 1].second, &param);
    if (req == nullptr || UCS_PTR_IS_ERR(req)) --op->pending;  // done, or never started
    if (UCS_PTR_IS_ERR(req)) {
      if (--op->pending == 0) delete op;  // the guard
      drop(std::static_pointer_cast<UcxSession>(s->shared_from_this()),
           ucx_error("ucp_am_send_nbx", UCS_PTR_STATUS(req)));
      return;
    }
  }
  if (--op->pending == 0) delete op;  // the guard
}

void UcxTransport::close_now(const std::shared_ptr<UcxSession>& s) {
  end_session(s, absl::UnavailableError("the connection was closed"), /*flush=*/true);
}

void UcxTransport::drop(const std::shared_ptr<UcxSession>& s, absl::Status why) {
  end_session(s, std::move(why), /*flush=*/false);
}

void UcxTransport::end_session(const std::shared_ptr<UcxSession>& s, absl::Status why, bool flush) {
  if (s->gone) return;
  s->gone = true;
  retired_.push_back(s);  // callbacks further up the stack may still use it
  known_.erase(s->id);
  {
    std::lock_guard<std::mutex> lock(sessions_mu_);
    by_id_.erase(s->id);
  }
  if (s->ep != nullptr) {
    ucp_ep_h ep = std::exchange(s->ep, nullptr);
    by_ep_.erase(ep);
    ucp_request_param_t param{};  // default: flush, queued sends go out first
    if (!flush) {
      param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      param.flags = UCP_EP_CLOSE_FLAG_FORCE;
    }
    ucs_status_ptr_t req = ucp_ep_close_nbx(ep, &param);
    if (UCS_PTR_IS_PTR(req)) ucp_request_free(req);  // completes in the background
  }
  if (s->side) s->side->close();
  s->hand_up_closed(std::move(why));
}

void UcxTransport::on_ep_error(void* arg, ucp_ep_h ep, ucs_status_t status) {
  auto* t = static_cast<UcxTransport*>(arg);
  auto it = t->by_ep_.find(ep);
  if (it == t->by_ep_.end()) return;
  std::shared_ptr<UcxSession> s = it->second;
  t->drop(s, absl::UnavailableError(ucs_status_string(status)));
}

ucs_status_t UcxTransport::on_frame_start(void* arg, const void*, size_t, void* data, size_t length,
                                          const ucp_am_recv_param_t* param) {
  auto* t = static_cast<UcxTransport*>(arg);
  if (length < kIdBytes) return UCS_OK;
  uint64_t to = 0;
  std::memcpy(&to, data, kIdBytes);
  UcxSession* s = t->session_by_id(to);
  if (s == nullptr || s->gone) return UCS_OK;
  if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) {
    s->hand_up_bad_frame(absl::InvalidArgumentError("a frame start arrived by rendezvous"));
    return UCS_OK;
  }
  const FrameLimits& limits = t->options_.limits;
  std::span<const std::byte> bytes(static_cast<const std::byte*>(data) + kIdBytes,
                                   length - kIdBytes);
  absl::StatusOr<FrameHeader> h = decode_header(bytes, limits);
  if (!h.ok()) {
    s->hand_up_bad_frame(h.status());
    return UCS_OK;
  }
  size_t table_end = kFrameHeaderBytes + h->lengths_bytes();
  bool whole = bytes.size() == h->total_bytes();
  if (bytes.size() != table_end && !whole) {
    s->hand_up_bad_frame(absl::InvalidArgumentError("frame start has the wrong size"));
    return UCS_OK;
  }
  absl::StatusOr<LengthTable> lengths =
      decode_lengths(*h, bytes.subspan(kFrameHeaderBytes), limits);
  if (!lengths.ok()) {
    s->hand_up_bad_frame(lengths.status());
    return UCS_OK;
  }
  if (!s->incoming.empty() && s->incoming.back()->next_part < s->incoming.back()->parts.size()) {
    s->hand_up_bad_frame(
        absl::InvalidArgumentError("a frame started before the last one was whole"));
    return UCS_OK;
  }
  if (whole && s->incoming.empty()) {  // the usual small frame: deliver it now
    Frame f;
    f.kind = h->kind;
    const std::byte* src = bytes.data() + table_end;
    f.message = Buffer::copy_of({src, h->message_bytes});
    src += h->message_bytes;
    f.buffers.reserve(lengths->size());
    for (uint64_t len : *lengths) {
      f.buffers.push_back(Buffer::copy_of({src, len}));
      src += len;
    }
    if (absl::Status v = validate_message(f.message, limits); !v.ok()) {
      s->hand_up_bad_frame(v);
    } else {
      s->hand_up_frame(std::move(f));
    }
    return UCS_OK;
  }
  auto in = std::make_unique<UcxSession::Incoming>();
  UcxSession::Incoming* raw = in.get();
  raw->frame.kind = h->kind;
  if (whole) {  // behind a frame still arriving: take it all now
    const std::byte* src = bytes.data() + table_end;
    raw->frame.message = Buffer::copy_of({src, h->message_bytes});
    src += h->message_bytes;
    for (uint64_t len : *lengths) {
      raw->frame.buffers.push_back(Buffer::copy_of({src, len}));
      src += len;
    }
  } else {
    raw->frame.message = Buffer(h->message_bytes);
    if (!raw->frame.message.empty())
      raw->parts.push_back({UcxSession::Incoming::kMessage, h->message_bytes});
    for (uint64_t len : *lengths) {
      raw->frame.buffers.emplace_back();
      if (len > 0) raw->parts.push_back({static_cast<int>(raw->frame.buffers.size() - 1), len});
    }
  }
  raw->complete = raw->parts.empty();
  s->incoming.push_back(std::move(in));
  if (raw->complete) s->deliver_completed();
  return UCS_OK;
}

ucs_status_t UcxTransport::on_frame_part(void* arg, const void* header, size_t header_length,
                                         void* data, size_t length,
                                         const ucp_am_recv_param_t* param) {
  auto* t = static_cast<UcxTransport*>(arg);
  if (header_length != kIdBytes) return UCS_OK;
  uint64_t to = 0;
  std::memcpy(&to, header, kIdBytes);
  UcxSession* s = t->session_by_id(to);
  if (s == nullptr || s->gone) return UCS_OK;
  if (s->incoming.empty() || s->incoming.back()->next_part >= s->incoming.back()->parts.size()) {
    s->hand_up_bad_frame(absl::InvalidArgumentError("a frame part with no frame to belong to"));
    return UCS_OK;
  }
  t->receive_part(std::static_pointer_cast<UcxSession>(s->shared_from_this()),
                  s->incoming.back().get(), data, length, param);
  return UCS_OK;
}

struct RecvOp {
  std::shared_ptr<UcxSession> session;
  UcxSession::Incoming* incoming;
  InFlight in_flight;
};

void UcxTransport::part_received(const std::shared_ptr<UcxSession>& s, UcxSession::Incoming* in) {
  if (++in->parts_done == in->parts.size()) {
    in->complete = true;
    s->deliver_completed();
  }
}

// Receives the next part of `in`: copied now if it came eagerly, otherwise
// pulled by rendezvous straight into its buffer.
void UcxTransport::receive_part(const std::shared_ptr<UcxSession>& s, UcxSession::Incoming* in,
                                void* data, size_t length, const ucp_am_recv_param_t* param) {
  const UcxSession::Incoming::Part part = in->parts[in->next_part++];
  const size_t size = part.bytes;
  if (length != size) {
    s->hand_up_bad_frame(absl::InvalidArgumentError(
        absl::StrCat("frame part of ", length, " bytes where ", size, " were announced")));
    return;
  }
  std::byte* target = s->land(*in, part);
  if ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) == 0) {
    std::memcpy(target, data, size);
    part_received(s, in);
    return;
  }
  auto* op = new RecvOp{s, in, InFlight(in_flight_)};
  ucp_request_param_t rp{};
  rp.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_DATATYPE;
  rp.datatype = ucp_dt_make_contig(1);
  rp.user_data = op;
  rp.cb.recv_am = [](void* request, ucs_status_t status, size_t, void* user) {
    auto* o = static_cast<RecvOp*>(user);
    if (status == UCS_OK) part_received(o->session, o->incoming);
    delete o;
    ucp_request_free(request);
  };
  ucs_status_ptr_t req = ucp_am_recv_data_nbx(worker_, data, target, size, &rp);
  if (req == nullptr) {
    delete op;
    part_received(s, in);
  } else if (UCS_PTR_IS_ERR(req)) {
    delete op;
    drop(s, ucx_error("ucp_am_recv_data_nbx", UCS_PTR_STATUS(req)));
  }
}

absl::StatusOr<std::unique_ptr<Listener>> UcxTransport::listen(std::string_view address,
                                                               AcceptCallback on_accept) {
  absl::StatusOr<std::string> side_addr = side_address(address);
  if (!side_addr.ok()) return side_addr.status();
  auto accept = std::make_shared<AcceptCallback>(std::move(on_accept));
  auto listener = side_->listen(*side_addr, [this, accept](std::shared_ptr<Connection> side) {
    // Runs on the side channel's I/O thread, once the peer is authenticated.
    auto s = open_session(Role::kServer, side, {}, *accept);
    return side_callbacks(s);
  });
  if (!listener.ok()) return listener.status();
  std::string bound = "ucx://" + (*listener)->address().substr(6);
  return std::unique_ptr<Listener>(new UcxListener(*std::move(listener), bound));
}

absl::StatusOr<std::shared_ptr<Connection>> UcxTransport::connect(std::string_view address,
                                                                  ConnectionCallbacks callbacks,
                                                                  absl::Duration timeout) {
  absl::Time deadline = absl::Now() + timeout;
  absl::StatusOr<std::string> side_addr = side_address(address);
  if (!side_addr.ok()) return side_addr.status();
  // The side channel's callbacks need the session, which needs the channel:
  // they meet in `early`, which keeps what arrives before the session exists.
  struct Early {
    std::mutex mu;
    std::weak_ptr<UcxSession> session;
    std::vector<Frame> frames;
    std::optional<absl::Status> closed;
  };
  auto early = std::make_shared<Early>();
  auto side =
      side_->connect(*side_addr,
                     ConnectionCallbacks{[this, early](Frame f) {
                                           std::unique_lock<std::mutex> lock(early->mu);
                                           if (early->session.expired()) {
                                             early->frames.push_back(std::move(f));
                                             return;
                                           }
                                           auto session = early->session;
                                           lock.unlock();
                                           side_callbacks(session).on_frame(std::move(f));
                                         },
                                         [this, early](absl::Status why) {
                                           std::unique_lock<std::mutex> lock(early->mu);
                                           if (early->session.expired()) {
                                             early->closed = std::move(why);
                                             return;
                                           }
                                           auto session = early->session;
                                           lock.unlock();
                                           side_callbacks(session).on_closed(std::move(why));
                                         }},
                     timeout);
  if (!side.ok()) return side.status();
  auto s = open_session(Role::kClient, *side, std::move(callbacks), nullptr);
  {
    std::lock_guard<std::mutex> lock(early->mu);
    early->session = s;
    ConnectionCallbacks cb = side_callbacks(s);
    for (Frame& f : early->frames)
      cb.on_frame(std::move(f));
    early->frames.clear();
    if (early->closed) cb.on_closed(*early->closed);
  }
  if (absl::Status ready = s->wait_ready(deadline); !ready.ok()) return ready;
  return std::shared_ptr<Connection>(s);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Transport>> make_transport(TransportOptions options) {
  return UcxTransport::create(std::move(options));
}

}  // namespace troupe::transport::ucx
