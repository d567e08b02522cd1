#include "transport/tcp/transport.h"

#include <netdb.h>
#include <pthread.h>

#include <asio.hpp>

#include <algorithm>
#include <cstring>
#include <deque>
#include <future>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "spdlog/spdlog.h"
#include "transport/address.h"
#include "transport/detail/session.h"

namespace troupe::transport::tcp {
namespace {

using asio::ip::tcp;

constexpr size_t kMaxFramesPerWrite = 64;
// What one read takes from the socket at most, once the peer is authenticated.
constexpr size_t kStagingBytes = 64 * 1024;
constexpr auto kCloseGrace = std::chrono::seconds(2);
// A connect whose handshake the listener closed tries again after these
// pauses, doubling from the first to the last.
constexpr absl::Duration kRetryPauseFirst = absl::Milliseconds(10);
constexpr absl::Duration kRetryPauseLast = absl::Milliseconds(200);

// The I/O context, shared with sessions so that one outliving the transport
// can still be destroyed; `stopped` tells them not to post to it any more.
struct Io {
  asio::io_context context;
  std::atomic<bool> stopped{false};
};

std::string endpoint_name(const tcp::endpoint& e) {
  if (e.address().is_v6()) return absl::StrCat("[", e.address().to_string(), "]:", e.port());
  return absl::StrCat(e.address().to_string(), ":", e.port());
}

// `host` as an address: an IP literal, or a name resolved now (a cluster
// manager names machines: "gpu07", "llama-workers-0-0.llama"). IPv4 first.
// Unavailable when the name does not resolve (yet: a pod's DNS record may
// come after the pod).
absl::StatusOr<asio::ip::address> resolve(const std::string& host) {
  asio::error_code ec;
  asio::ip::address ip = asio::ip::make_address(host, ec);
  if (!ec) return ip;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (rc != 0 || found == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("cannot resolve host '", host, "': ", ::gai_strerror(rc)));
  }
  std::optional<asio::ip::address> v4, v6;
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    if (a->ai_family == AF_INET && !v4) {
      const auto* in = reinterpret_cast<const sockaddr_in*>(a->ai_addr);
      asio::ip::address_v4::bytes_type b;
      std::memcpy(b.data(), &in->sin_addr, b.size());
      v4 = asio::ip::address_v4(b);
    } else if (a->ai_family == AF_INET6 && !v6) {
      const auto* in6 = reinterpret_cast<const sockaddr_in6*>(a->ai_addr);
      asio::ip::address_v6::bytes_type b;
      std::memcpy(b.data(), &in6->sin6_addr, b.size());
      v6 = asio::ip::address_v6(b);
    }
  }
  ::freeaddrinfo(found);
  if (v4) return *v4;
  if (v6) return *v6;
  return absl::UnavailableError(absl::StrCat("host '", host, "' has no IP address"));
}

class TcpSession final : public detail::Session {
 public:
  TcpSession(Role role, const TransportOptions& options, std::shared_ptr<TransportStats> stats,
             std::shared_ptr<Io> io, tcp::socket socket)
      : Session(role, options, std::move(stats), "tcp " + peer_of(socket)),
        io_(std::move(io)),
        socket_(std::move(socket)),
        close_timer_(io_->context) {}

  // On the I/O thread: begins the read loop.
  void start_reading() { read_more(); }

  // On the I/O thread: drops the socket now.
  void close_socket() {
    asio::error_code ignored;
    socket_.close(ignored);
    close_timer_.cancel();
  }

 protected:
  absl::Status write_frame(Frame&& frame) override {
    Outgoing out;
    out.header = encode_header(header_of(frame));
    out.lengths = encode_lengths(frame);
    out.frame = std::move(frame);
    {
      std::lock_guard<std::mutex> lock(out_mu_);
      if (shutdown_requested_ || io_->stopped.load()) {
        return absl::UnavailableError(absl::StrCat("connection to ", peer_name(), " is closed"));
      }
      outbox_.push_back(std::move(out));
      if (writing_) return absl::OkStatus();
      writing_ = true;
    }
    asio::post(io_->context, [self = self()] { self->write_next(); });
    return absl::OkStatus();
  }

  void drop_channel() override {
    {
      std::lock_guard<std::mutex> lock(out_mu_);
      outbox_.clear();  // in_flight_ goes when its write fails on the closed socket
      shutdown_requested_ = true;
    }
    if (!io_->stopped.load()) {
      asio::post(io_->context, [self = self()] {
        asio::error_code ec = asio::error::operation_aborted;
        self->channel_failed(ec);
      });
    }
  }

  void shutdown_channel() override {
    {
      std::lock_guard<std::mutex> lock(out_mu_);
      if (shutdown_requested_) return;
      shutdown_requested_ = true;
      if (writing_) return;  // write_next() finishes the shutdown
      writing_ = true;
    }
    if (!io_->stopped.load()) asio::post(io_->context, [self = self()] { self->write_next(); });
  }

 private:
  struct Outgoing {
    std::array<std::byte, kFrameHeaderBytes> header;
    LengthTable lengths;
    Frame frame;
  };

  static std::string peer_of(const tcp::socket& s) {
    asio::error_code ec;
    tcp::endpoint e = s.remote_endpoint(ec);
    return ec ? std::string("(unconnected)") : endpoint_name(e);
  }

  std::shared_ptr<TcpSession> self() {
    return std::static_pointer_cast<TcpSession>(shared_from_this());
  }

  // Writes queued frames, several per system call; finishes a requested
  // shutdown once the queue is empty. I/O thread.
  void write_next() {
    bool finish_shutdown = false;
    {
      std::lock_guard<std::mutex> lock(out_mu_);
      in_flight_.clear();
      while (!outbox_.empty() && in_flight_.size() < kMaxFramesPerWrite) {
        in_flight_.push_back(std::move(outbox_.front()));
        outbox_.pop_front();
      }
      if (in_flight_.empty()) {
        writing_ = false;
        finish_shutdown = shutdown_requested_;
      }
    }
    if (finish_shutdown) {
      begin_close();
      return;
    }
    if (in_flight_.empty()) return;
    std::vector<asio::const_buffer> buffers;
    for (const Outgoing& o : in_flight_) {
      buffers.emplace_back(o.header.data(), o.header.size());
      if (!o.lengths.empty()) buffers.emplace_back(o.lengths.data(), o.lengths.size() * 8);
      if (!o.frame.message.empty())
        buffers.emplace_back(o.frame.message.data(), o.frame.message.size());
      for (const Buffer& b : o.frame.buffers) {
        if (!b.empty()) buffers.emplace_back(b.data(), b.size());
      }
    }
    asio::async_write(socket_, buffers, [self = self()](asio::error_code ec, size_t) {
      if (ec) {
        self->channel_failed(ec);
        std::lock_guard<std::mutex> lock(self->out_mu_);
        self->outbox_.clear();
        self->in_flight_.clear();
        self->writing_ = false;
        return;
      }
      self->write_next();
    });
  }

  // Half-close: the peer reads everything we sent, then end-of-file. The
  // socket is closed when the peer closes too, or after a grace period.
  void begin_close() {
    asio::error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_send, ignored);
    close_timer_.expires_after(kCloseGrace);
    close_timer_.async_wait([self = self()](asio::error_code ec) {
      if (!ec) self->close_socket();
    });
  }

  void channel_failed(asio::error_code ec) {
    if (reported_) return;
    reported_ = true;
    on_channel_closed(absl::UnavailableError(
        ec == asio::error::eof ? std::string("the peer closed the connection") : ec.message()));
    close_socket();
  }

  // Reading. Bytes arrive in a staging buffer, as many as the socket has, and
  // frames are taken from it whole: a stream of small frames costs one system
  // call for as many as came together. A body longer than what is staged is
  // read the rest of the way straight into its buffers. Before the peer is
  // authenticated the staging buffer holds one handshake frame at most.
  void read_more() {
    const size_t staged = staged_end_ - staged_begin_;
    if (staged_begin_ > 0) {
      if (staged > 0) std::memmove(staging_.data(), staging_.data() + staged_begin_, staged);
      staged_begin_ = 0;
      staged_end_ = staged;
    }
    const size_t room = frame_limits().max_frame_bytes < kStagingBytes
                            ? static_cast<size_t>(kHandshakeLimits.max_frame_bytes)
                            : kStagingBytes;
    const size_t want = std::max(staged + 1, room);
    if (staging_.size() < want) staging_.resize(want);
    socket_.async_read_some(
        asio::buffer(staging_.data() + staged_end_, staging_.size() - staged_end_),
        [self = self()](asio::error_code ec, size_t n) { self->on_read(ec, n); });
  }

  void on_read(asio::error_code ec, size_t n) {
    if (ec) return channel_failed(ec);
    staged_end_ += n;
    take_frames();
  }

  // Delivers the whole frames staged, then reads on.
  void take_frames() {
    for (;;) {
      std::span<const std::byte> staged(staging_.data() + staged_begin_,
                                        staged_end_ - staged_begin_);
      if (staged.size() < kFrameHeaderBytes) return read_more();
      absl::StatusOr<FrameHeader> h =
          decode_header(staged.first(kFrameHeaderBytes), frame_limits());
      if (!h.ok()) return bad_frame(h.status());
      const size_t table_end = kFrameHeaderBytes + h->lengths_bytes();
      if (staged.size() < table_end) return read_more();
      if (absl::Status s = decode_lengths(*h, staged.subspan(kFrameHeaderBytes, h->lengths_bytes()),
                                          frame_limits(), lengths_);
          !s.ok()) {
        return bad_frame(s);
      }
      staged_begin_ += table_end;
      refit(incoming_, h->kind, h->message_bytes, lengths_);
      // The body's parts, in order; what is staged is copied into them.
      targets_.clear();
      if (!incoming_.message.empty())
        targets_.emplace_back(incoming_.message.data(), incoming_.message.size());
      for (Buffer& b : incoming_.buffers) {
        if (!b.empty()) targets_.emplace_back(b.data(), b.size());
      }
      size_t rest = 0;  // the first part not wholly staged
      for (; rest < targets_.size(); ++rest) {
        asio::mutable_buffer& t = targets_[rest];
        const size_t n = std::min(staged_end_ - staged_begin_, t.size());
        if (n > 0) std::memcpy(t.data(), staging_.data() + staged_begin_, n);
        staged_begin_ += n;
        if (n < t.size()) {
          t += n;
          break;
        }
      }
      if (rest < targets_.size()) {
        targets_.erase(targets_.begin(), targets_.begin() + static_cast<ptrdiff_t>(rest));
        asio::async_read(socket_, targets_,
                         [self = self()](asio::error_code e, size_t) { self->on_body(e); });
        return;
      }
      if (!deliver()) return;
    }
  }

  void on_body(asio::error_code ec) {
    if (ec) return channel_failed(ec);
    if (deliver()) take_frames();
  }

  // Hands the frame read into incoming_ up; false if it was malformed (the
  // connection has then ended).
  bool deliver() {
    if (absl::Status s = validate_message(incoming_.message, frame_limits()); !s.ok()) {
      bad_frame(s);
      return false;
    }
    on_frame_received(incoming_);
    return true;
  }

  // A frame that broke the rules: this connection ends; nothing else is affected.
  void bad_frame(const absl::Status& why) {
    on_bad_frame(why);
    close_socket();
  }

  std::shared_ptr<Io> io_;
  tcp::socket socket_;
  asio::steady_timer close_timer_;
  bool reported_ = false;  // I/O thread

  // Read state (I/O thread).
  std::vector<std::byte> staging_;  // bytes read, not yet taken
  size_t staged_begin_ = 0;         // the staged bytes: [begin, end)
  size_t staged_end_ = 0;
  Frame incoming_;                             // lent to the callbacks
  LengthTable lengths_;                        // the table of the frame being read
  std::vector<asio::mutable_buffer> targets_;  // where its body's parts go

  // Write state.
  std::mutex out_mu_;
  std::deque<Outgoing> outbox_;
  bool writing_ = false;
  bool shutdown_requested_ = false;
  std::vector<Outgoing> in_flight_;  // I/O thread
};

class TcpListener final : public Listener {
 public:
  TcpListener(std::shared_ptr<Io> io, std::shared_ptr<tcp::acceptor> acceptor, std::string address)
      : io_(std::move(io)), acceptor_(std::move(acceptor)), address_(std::move(address)) {}
  ~TcpListener() override { close(); }
  std::string address() const override { return address_; }
  void close() override {
    if (io_->stopped.load()) return;
    std::promise<void> done;
    asio::post(io_->context, [this, &done] {
      asio::error_code ignored;
      acceptor_->close(ignored);
      done.set_value();
    });
    done.get_future().wait();
  }

 private:
  std::shared_ptr<Io> io_;
  std::shared_ptr<tcp::acceptor> acceptor_;
  std::string address_;
};

class TcpTransport final : public Transport {
 public:
  TcpTransport(TransportOptions options, std::shared_ptr<TransportStats> stats)
      : options_(std::move(options)),
        stats_(std::move(stats)),
        io_(std::make_shared<Io>()),
        work_(asio::make_work_guard(io_->context)),
        thread_([this] {
          pthread_setname_np(pthread_self(), "troupe-tcp");  // as top -H and perf show it
          io_->context.run();
        }) {}

  // REQUIRES: not called from one of this transport's callbacks.
  ~TcpTransport() override {
    std::promise<void> done;
    asio::post(io_->context, [this, &done] {
      // Callbacks run without our lock held: they may take locks of their own
      // that are also held while calling into this transport.
      std::vector<std::shared_ptr<TcpSession>> live;
      {
        std::lock_guard<std::mutex> lock(mu_);
        for (auto& weak : sessions_) {
          if (auto s = weak.lock()) live.push_back(std::move(s));
        }
        for (auto& a : acceptors_) {
          asio::error_code ignored;
          a->close(ignored);
        }
      }
      for (auto& s : live) {
        s->abort(absl::UnavailableError("the transport is shutting down"));
        s->close_socket();
      }
      done.set_value();
    });
    done.get_future().wait();
    io_->stopped.store(true);
    work_.reset();
    io_->context.stop();
    thread_.join();
    // Complete what the closed sockets left pending, releasing the sessions it holds.
    io_->context.restart();
    io_->context.poll();
  }

  std::string_view name() const override { return "tcp"; }
  const TransportStats& stats() const override { return *stats_; }

  absl::StatusOr<std::unique_ptr<Listener>> listen(std::string_view address,
                                                   AcceptCallback on_accept) override {
    absl::StatusOr<HostPort> hp = parse_address(address, "tcp");
    if (!hp.ok()) return hp.status();
    asio::error_code ec;
    asio::ip::address ip = asio::ip::make_address(hp->host, ec);
    if (ec) return absl::InvalidArgumentError(absl::StrCat("bad IP address '", hp->host, "'"));
    auto acceptor = std::make_shared<tcp::acceptor>(io_->context);
    tcp::endpoint endpoint(ip, hp->port);
    acceptor->open(endpoint.protocol(), ec);
    if (!ec) acceptor->set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) acceptor->bind(endpoint, ec);
    if (!ec) acceptor->listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
      return absl::UnavailableError(
          absl::StrCat("cannot listen on ", std::string(address), ": ", ec.message()));
    }
    std::string bound = absl::StrCat("tcp://", endpoint_name(acceptor->local_endpoint()));
    {
      std::lock_guard<std::mutex> lock(mu_);
      acceptors_.push_back(acceptor);
    }
    asio::post(io_->context, [this, acceptor, cb = std::move(on_accept)]() mutable {
      accept_next(acceptor, std::make_shared<AcceptCallback>(std::move(cb)));
    });
    return std::unique_ptr<Listener>(new TcpListener(io_, acceptor, bound));
  }

  absl::StatusOr<std::shared_ptr<Connection>> connect(std::string_view address,
                                                      ConnectionCallbacks callbacks,
                                                      absl::Duration timeout) override {
    absl::Time deadline = absl::Now() + timeout;
    absl::StatusOr<HostPort> hp = parse_address(address, "tcp");
    if (!hp.ok()) return hp.status();
    absl::StatusOr<asio::ip::address> ip = resolve(hp->host);
    if (!ip.ok()) return ip.status();
    tcp::endpoint endpoint(*ip, hp->port);
    // A listener busy with unauthenticated peers may close our connection to
    // make room; the node is alive (it accepted), so we try again.
    absl::Duration pause = kRetryPauseFirst;
    for (int attempt = 1;; ++attempt) {
      absl::StatusOr<std::shared_ptr<Connection>> c =
          connect_once(address, endpoint, callbacks, deadline);
      const bool closed_in_handshake =
          !c.ok() && absl::IsUnavailable(c.status()) &&
          absl::StartsWith(c.status().message(), detail::kClosedDuringHandshake);
      if (!closed_in_handshake || absl::Now() + pause >= deadline) return c;
      spdlog::debug("tcp: {} (attempt {}); trying again in {}", std::string(c.status().message()),
                    attempt, absl::FormatDuration(pause));
      absl::SleepFor(pause);
      pause = std::min(2 * pause, kRetryPauseLast);
    }
  }

 private:
  // One TCP connection and handshake, within `deadline`.
  absl::StatusOr<std::shared_ptr<Connection>> connect_once(std::string_view address,
                                                           const tcp::endpoint& endpoint,
                                                           ConnectionCallbacks callbacks,
                                                           absl::Time deadline) {
    auto socket = std::make_shared<tcp::socket>(io_->context);
    auto timer = std::make_shared<asio::steady_timer>(io_->context);
    std::promise<asio::error_code> connected;
    auto result = connected.get_future();
    const absl::Duration timeout = std::max(deadline - absl::Now(), absl::ZeroDuration());
    asio::post(io_->context, [&, socket, timer] {
      timer->expires_after(absl::ToChronoNanoseconds(timeout));
      timer->async_wait([socket](asio::error_code e) {
        if (!e) socket->close();
      });
      socket->async_connect(endpoint, [&, timer](asio::error_code e) {
        timer->cancel();
        connected.set_value(e);
      });
    });
    asio::error_code ec = result.get();
    if (ec) {
      return absl::UnavailableError(absl::StrCat(
          "cannot connect to ", std::string(address), ": ",
          ec == asio::error::operation_aborted ? std::string("timed out") : ec.message()));
    }
    socket->set_option(tcp::no_delay(true), ec);
    auto session =
        std::make_shared<TcpSession>(Role::kClient, options_, stats_, io_, std::move(*socket));
    session->set_callbacks(std::move(callbacks));
    track(session);
    asio::post(io_->context, [session] {
      session->start_reading();
      session->start();
    });
    absl::Status ready = session->wait_ready(deadline);
    if (!ready.ok()) return ready;
    return std::shared_ptr<Connection>(session);
  }

  void accept_next(std::shared_ptr<tcp::acceptor> acceptor, std::shared_ptr<AcceptCallback> cb) {
    acceptor->async_accept([this, acceptor, cb](asio::error_code ec, tcp::socket socket) {
      if (ec) {
        if (ec == asio::error::operation_aborted || !acceptor->is_open()) return;
        accept_next(acceptor, cb);  // e.g. too many open files: keep serving
        return;
      }
      asio::error_code ignored;
      tcp::endpoint peer = socket.remote_endpoint(ignored);
      make_room_for(peer.address());
      socket.set_option(tcp::no_delay(true), ignored);
      auto session =
          std::make_shared<TcpSession>(Role::kServer, options_, stats_, io_, std::move(socket));
      session->set_accept(*cb);
      track(session);
      unheard_.push_back({session, peer.address()});
      auto timer = std::make_shared<asio::steady_timer>(io_->context);
      timer->expires_after(absl::ToChronoNanoseconds(options_.handshake_timeout));
      timer->async_wait([weak = std::weak_ptr<TcpSession>(session), timer](asio::error_code e) {
        auto s = weak.lock();
        if (!e && s && !s->open()) {
          s->abort(absl::DeadlineExceededError(
              absl::StrCat("refused ", s->peer_name(), ": no handshake within the deadline")));
        }
      });
      session->start_reading();
      session->start();
      accept_next(acceptor, cb);
    });
  }

  // Before accepting a peer at `source`: if that would exceed what
  // unauthenticated peers may hold (TransportOptions::max_handshaking, per
  // source and in all), closes the oldest connection still in its handshake
  // that the peer counts against. I/O thread.
  void make_room_for(const asio::ip::address& source) {
    std::erase_if(unheard_, [](const Unheard& u) {
      auto s = u.session.lock();
      return s == nullptr || !s->handshaking();
    });
    auto oldest_of_source = std::find_if(unheard_.begin(), unheard_.end(),
                                         [&](const Unheard& u) { return u.source == source; });
    const auto from_source = std::count_if(unheard_.begin(), unheard_.end(),
                                           [&](const Unheard& u) { return u.source == source; });
    auto evict = unheard_.end();
    if (from_source >= options_.max_handshaking_per_source) {
      evict = oldest_of_source;
    } else if (std::ssize(unheard_) >= options_.max_handshaking) {
      evict = unheard_.begin();
    }
    if (evict == unheard_.end()) return;
    if (auto s = evict->session.lock()) {
      stats_->connections_shed.fetch_add(1, std::memory_order_relaxed);
      s->abort(absl::ResourceExhaustedError(
          absl::StrCat("closed ", s->peer_name(),
                       " unheard: too many connections in their handshake, the oldest make room")));
      s->close_socket();
    }
    unheard_.erase(evict);
  }

  void track(const std::shared_ptr<TcpSession>& s) {
    std::lock_guard<std::mutex> lock(mu_);
    std::erase_if(sessions_, [](const std::weak_ptr<TcpSession>& w) { return w.expired(); });
    sessions_.push_back(s);
  }

  const TransportOptions options_;
  std::shared_ptr<TransportStats> stats_;
  std::shared_ptr<Io> io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  std::thread thread_;
  std::mutex mu_;
  std::vector<std::weak_ptr<TcpSession>> sessions_;
  std::vector<std::shared_ptr<tcp::acceptor>> acceptors_;
  // Accepted connections in their handshake, oldest first (I/O thread).
  struct Unheard {
    std::weak_ptr<TcpSession> session;
    asio::ip::address source;
  };
  std::deque<Unheard> unheard_;
};

}  // namespace

std::unique_ptr<Transport> make_transport(TransportOptions options) {
  return make_transport(std::move(options), std::make_shared<TransportStats>());
}

std::unique_ptr<Transport> make_transport(TransportOptions options,
                                          std::shared_ptr<TransportStats> stats) {
  return std::make_unique<TcpTransport>(std::move(options), std::move(stats));
}

}  // namespace troupe::transport::tcp
