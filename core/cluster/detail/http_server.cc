// The head's HTTP status server (http_status.h): one I/O thread, every
// connection a socket, a request buffer and a deadline, the oldest closed
// when kMaxHttpConnections are open. The status is asked of its source on a
// thread of its own, one request at a time, its answer serving every client
// that waited for it: a slow head holds up the scrapes, not the I/O thread.
#include <asio.hpp>

#include <array>
#include <condition_variable>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/cluster/detail/http_status.h"

namespace troupe::cluster {
namespace {

using asio::ip::tcp;

// After a failed accept (out of file descriptors), before the next one.
constexpr auto kAcceptRetry = std::chrono::milliseconds(10);
// How long a client may wait for the status (its source bounds its own wait).
constexpr absl::Duration kStatusWait = absl::Seconds(10);

// One client connection. Lives as long as an operation on it is pending.
struct Client {
  explicit Client(tcp::socket s) : socket(std::move(s)), deadline(socket.get_executor()) {}
  tcp::socket socket;
  asio::steady_timer deadline;
  uint64_t deadline_generation = 0;  // a deadline armed again makes the last one moot
  std::array<char, 4096> chunk{};
  std::string received;  // at most kMaxRequestBytes + one chunk
  std::string sending;
  int served = 0;
  bool closed = false;
  std::list<std::weak_ptr<Client>>::iterator place;  // in the server's list, oldest first
};

}  // namespace

class HttpStatusServer::Impl {
 public:
  explicit Impl(StatusSource status) : status_(std::move(status)), acceptor_(io_), retry_(io_) {}

  ~Impl() {
    {
      std::lock_guard<std::mutex> lock(fetch_mu_);
      stopping_ = true;
    }
    fetch_cv_.notify_all();
    if (fetcher_.joinable()) fetcher_.join();
    if (thread_.joinable()) {
      asio::post(io_, [this] {
        asio::error_code ignored;
        acceptor_.close(ignored);
        retry_.cancel();
        while (!clients_.empty()) {
          if (auto c = clients_.front().lock()) {
            close(c);
          } else {
            clients_.pop_front();
          }
        }
        io_.stop();
      });
      thread_.join();
    }
  }

  absl::Status listen(const std::string& host, uint16_t port) {
    asio::error_code ec;
    asio::ip::address ip = asio::ip::make_address(host, ec);
    if (ec) return absl::InvalidArgumentError(absl::StrCat("HTTP: bad IP address '", host, "'"));
    tcp::endpoint endpoint(ip, port);
    acceptor_.open(endpoint.protocol(), ec);
    if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) acceptor_.bind(endpoint, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
      return absl::UnavailableError(
          absl::StrCat("HTTP: cannot listen on ", host, ":", port, ": ", ec.message()));
    }
    port_ = acceptor_.local_endpoint().port();
    accept_next();
    thread_ = std::thread([this] { io_.run(); });
    fetcher_ = std::thread([this] { fetch_loop(); });
    return absl::OkStatus();
  }

  uint16_t port() const { return port_; }

 private:
  void accept_next() {
    acceptor_.async_accept([this](asio::error_code ec, tcp::socket socket) {
      if (ec) {
        if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
        // Out of file descriptors (or another passing failure): make room
        // and try again shortly, rather than spinning on the error.
        evict_oldest();
        retry_.expires_after(kAcceptRetry);
        retry_.async_wait([this](asio::error_code e) {
          if (!e) accept_next();
        });
        return;
      }
      if (clients_.size() >= kMaxHttpConnections) evict_oldest();
      auto c = std::make_shared<Client>(std::move(socket));
      clients_.push_back(c);
      c->place = std::prev(clients_.end());
      arm_deadline(c);
      read_more(c);
      accept_next();
    });
  }

  // Closes the connection opened longest ago: a scrape that just arrived
  // is served before a client that has held its connection the longest.
  void evict_oldest() {
    while (!clients_.empty()) {
      std::shared_ptr<Client> c = clients_.front().lock();
      if (c == nullptr) {
        clients_.pop_front();
        continue;
      }
      close(c);
      return;
    }
  }

  void close(const std::shared_ptr<Client>& c) {
    if (c->closed) return;
    c->closed = true;
    asio::error_code ignored;
    c->socket.close(ignored);
    c->deadline.cancel();
    clients_.erase(c->place);
  }

  // The client has kClientTimeout from now to send its request (or to take
  // our answer); then the connection is closed.
  void arm_deadline(const std::shared_ptr<Client>& c) {
    const uint64_t generation = ++c->deadline_generation;
    c->deadline.expires_after(absl::ToChronoNanoseconds(kClientTimeout));
    c->deadline.async_wait([this, c, generation](asio::error_code ec) {
      if (!ec && generation == c->deadline_generation) close(c);
    });
  }

  void read_more(const std::shared_ptr<Client>& c) {
    c->socket.async_read_some(asio::buffer(c->chunk), [this, c](asio::error_code ec, size_t n) {
      if (c->closed) return;
      if (ec) return close(c);
      c->received.append(c->chunk.data(), n);
      serve_buffered(c);
    });
  }

  // Answers the request at the start of what was received, if it is whole;
  // else reads on.
  void serve_buffered(const std::shared_ptr<Client>& c) {
    absl::StatusOr<std::optional<HttpRequest>> request = parse_http_request(c->received);
    if (!request.ok()) {
      // Said once, then the connection ends: what follows is not read.
      c->received.clear();
      return write(c, serialize(error_response(request.status()), /*keep_alive=*/false), false);
    }
    if (!request->has_value()) return read_more(c);
    HttpRequest r = **std::move(request);
    c->received.erase(0, r.head_bytes);
    if (r.path == "/" || r.path == "/metrics") {
      // Answered once the status comes (with everyone else who asks meanwhile).
      c->deadline_generation++;  // the request is whole: no deadline while the status is asked
      arm_status_wait(c);
      waiting_.emplace_back(c, std::move(r));
      if (!fetch_pending_) {
        fetch_pending_ = true;
        {
          std::lock_guard<std::mutex> lock(fetch_mu_);
          fetch_wanted_ = true;
        }
        fetch_cv_.notify_one();
      }
      return;
    }
    respond(c, r, absl::UnavailableError("no status asked"));
  }

  // Answers `r` on `c`: from `status` at / and /metrics, as answer() does.
  void respond(const std::shared_ptr<Client>& c, const HttpRequest& r,
               const absl::StatusOr<ClusterStatus>& status) {
    const bool keep_alive = r.keep_alive && ++c->served < kMaxRequestsPerConnection;
    write(c, serialize(answer(r, status), keep_alive, r.method == "HEAD"), keep_alive);
  }

  // A client waiting for the status has kStatusWait.
  void arm_status_wait(const std::shared_ptr<Client>& c) {
    const uint64_t generation = ++c->deadline_generation;
    c->deadline.expires_after(absl::ToChronoNanoseconds(kStatusWait));
    c->deadline.async_wait([this, c, generation](asio::error_code ec) {
      if (!ec && generation == c->deadline_generation) close(c);
    });
  }

  // The fetcher thread: asks the source whenever the I/O thread wants the
  // status, and hands the answer back to it.
  void fetch_loop() {
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(fetch_mu_);
        fetch_cv_.wait(lock, [this] { return fetch_wanted_ || stopping_; });
        if (stopping_) return;
        fetch_wanted_ = false;
      }
      auto status = std::make_shared<absl::StatusOr<ClusterStatus>>(status_());
      asio::post(io_, [this, status] { answer_waiting(*status); });
    }
  }

  // I/O thread: every client that waited gets its answer from `status`.
  void answer_waiting(const absl::StatusOr<ClusterStatus>& status) {
    fetch_pending_ = false;
    for (auto& [c, r] : std::exchange(waiting_, {})) {
      if (!c->closed) respond(c, r, status);
    }
  }

  void write(const std::shared_ptr<Client>& c, std::string bytes, bool keep_alive) {
    arm_deadline(c);
    c->sending = std::move(bytes);
    asio::async_write(c->socket, asio::buffer(c->sending),
                      [this, c, keep_alive](asio::error_code ec, size_t) {
                        if (c->closed) return;
                        if (ec || !keep_alive) {
                          asio::error_code ignored;
                          c->socket.shutdown(tcp::socket::shutdown_send, ignored);
                          return close(c);
                        }
                        arm_deadline(c);
                        serve_buffered(c);  // a request sent before our answer (pipelined)
                      });
  }

  const StatusSource status_;
  // The status asked of its source (fetcher thread), and who waits for it.
  std::mutex fetch_mu_;
  std::condition_variable fetch_cv_;
  bool fetch_wanted_ = false;                                             // guarded by fetch_mu_
  bool stopping_ = false;                                                 // guarded by fetch_mu_
  bool fetch_pending_ = false;                                            // I/O thread
  std::vector<std::pair<std::shared_ptr<Client>, HttpRequest>> waiting_;  // I/O thread
  std::thread fetcher_;
  asio::io_context io_;
  tcp::acceptor acceptor_;
  asio::steady_timer retry_;
  std::list<std::weak_ptr<Client>> clients_;  // I/O thread; oldest first
  uint16_t port_ = 0;
  std::thread thread_;
};

HttpStatusServer::HttpStatusServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpStatusServer::~HttpStatusServer() = default;

uint16_t HttpStatusServer::port() const {
  return impl_->port();
}

absl::StatusOr<std::unique_ptr<HttpStatusServer>> HttpStatusServer::start(const std::string& host,
                                                                          uint16_t port,
                                                                          StatusSource status) {
  auto impl = std::make_unique<Impl>(std::move(status));
  if (absl::Status s = impl->listen(host, port); !s.ok()) return s;
  return std::unique_ptr<HttpStatusServer>(new HttpStatusServer(std::move(impl)));
}

}  // namespace troupe::cluster
