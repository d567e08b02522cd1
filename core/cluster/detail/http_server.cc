// The head's HTTP status server (http_status.h): one I/O thread, every
// connection a socket, a request buffer and a deadline, the oldest closed
// when kMaxHttpConnections are open. What a request needs (the status, a
// job's metrics) is asked of its source on a thread of its own, one asking at
// a time, its answer serving every client that waited for the same: a slow
// head holds up those requests, not the I/O thread.
#include <asio.hpp>

#include <array>
#include <condition_variable>
#include <deque>
#include <list>
#include <map>
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
  explicit Impl(HttpSources sources) : sources_(std::move(sources)), acceptor_(io_), retry_(io_) {}

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
    const HttpRoute route = route_of(r);
    if (route.needs == HttpRoute::kNothing) return respond(c, r, HttpFetched{});
    // Answered once what it needs comes (with everyone else who asks for it meanwhile).
    c->deadline_generation++;  // the request is whole: no deadline while the status is asked
    arm_status_wait(c);
    auto& waiters = waiting_[key_of(route)];
    const bool ask = waiters.empty();
    waiters.emplace_back(c, std::move(r));
    if (ask) {
      {
        std::lock_guard<std::mutex> lock(fetch_mu_);
        wanted_.push_back(route);
      }
      fetch_cv_.notify_one();
    }
  }

  static std::pair<int, uint32_t> key_of(const HttpRoute& route) {
    return {static_cast<int>(route.needs), route.job};
  }

  // Answers `r` on `c` from what was fetched for it, as answer() does.
  void respond(const std::shared_ptr<Client>& c, const HttpRequest& r, const HttpFetched& fetched) {
    const bool keep_alive = r.keep_alive && ++c->served < kMaxRequestsPerConnection;
    write(c, serialize(answer(r, fetched), keep_alive, r.method == "HEAD"), keep_alive);
  }

  // A client waiting for the status has kStatusWait.
  void arm_status_wait(const std::shared_ptr<Client>& c) {
    const uint64_t generation = ++c->deadline_generation;
    c->deadline.expires_after(absl::ToChronoNanoseconds(kStatusWait));
    c->deadline.async_wait([this, c, generation](asio::error_code ec) {
      if (!ec && generation == c->deadline_generation) close(c);
    });
  }

  // The fetcher thread: asks the sources for what the I/O thread wants, in
  // turn, and hands each answer back to it.
  void fetch_loop() {
    for (;;) {
      HttpRoute route;
      {
        std::unique_lock<std::mutex> lock(fetch_mu_);
        fetch_cv_.wait(lock, [this] { return !wanted_.empty() || stopping_; });
        if (stopping_) return;
        route = wanted_.front();
        wanted_.pop_front();
      }
      auto fetched = std::make_shared<HttpFetched>();
      if (route.needs == HttpRoute::kStatus) fetched->status = sources_.status();
      if (route.needs == HttpRoute::kJob) {
        fetched->job = sources_.job_metrics ? sources_.job_metrics(route.job)
                                            : absl::NotFoundError("no job metrics here");
      }
      asio::post(io_, [this, route, fetched] { answer_waiting(route, *fetched); });
    }
  }

  // I/O thread: every client that waited for `route` gets its answer.
  void answer_waiting(const HttpRoute& route, const HttpFetched& fetched) {
    auto it = waiting_.find(key_of(route));
    if (it == waiting_.end()) return;
    auto waiters = std::move(it->second);
    waiting_.erase(it);
    for (auto& [c, r] : waiters) {
      if (!c->closed) respond(c, r, fetched);
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

  const HttpSources sources_;
  // What is asked of the sources (fetcher thread), and who waits for each.
  std::mutex fetch_mu_;
  std::condition_variable fetch_cv_;
  std::deque<HttpRoute> wanted_;  // guarded by fetch_mu_
  bool stopping_ = false;         // guarded by fetch_mu_
  std::map<std::pair<int, uint32_t>, std::vector<std::pair<std::shared_ptr<Client>, HttpRequest>>>
      waiting_;  // I/O thread
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
                                                                          HttpSources sources) {
  auto impl = std::make_unique<Impl>(std::move(sources));
  if (absl::Status s = impl->listen(host, port); !s.ok()) return s;
  return std::unique_ptr<HttpStatusServer>(new HttpStatusServer(std::move(impl)));
}

}  // namespace troupe::cluster
