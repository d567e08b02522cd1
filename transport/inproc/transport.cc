#include "transport/inproc/transport.h"

#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "transport/detail/session.h"

namespace troupe::transport::inproc {
namespace {

constexpr std::string_view kScheme = "inproc://";
constexpr char kSchemeText[] = "inproc://";

class InprocSession;

// A transport's I/O thread: delivers frames and closes in order, and owns
// its sessions until their channel closes (a connection lives until closed,
// not until its handle is dropped).
class IoThread {
 public:
  IoThread() : thread_([this] { run(); }) {}
  ~IoThread();

  struct Delivery {
    std::shared_ptr<InprocSession> target;
    std::optional<Frame> frame;  // absent: the channel closed
  };

  // False once the thread is stopping.
  bool post(Delivery d) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return false;
      queue_.push_back(std::move(d));
    }
    cv_.notify_one();
    return true;
  }
  void adopt(std::shared_ptr<InprocSession> s) {
    std::lock_guard<std::mutex> lock(mu_);
    live_.push_back(std::move(s));
  }

 private:
  void run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Delivery> queue_;
  std::vector<std::shared_ptr<InprocSession>> live_;
  bool stop_ = false;
  std::thread thread_;
};

// How sessions reach a transport's I/O thread: cleared when the transport
// goes, so that a session outliving it fails to post instead of crashing.
class IoHandle {
 public:
  explicit IoHandle(IoThread* io) : io_(io) {}
  bool post(IoThread::Delivery d) {
    std::lock_guard<std::mutex> lock(mu_);
    return io_ != nullptr && io_->post(std::move(d));
  }
  void adopt(std::shared_ptr<InprocSession> s) {
    std::lock_guard<std::mutex> lock(mu_);
    if (io_ != nullptr) io_->adopt(std::move(s));
  }
  void detach() {
    std::lock_guard<std::mutex> lock(mu_);
    io_ = nullptr;
  }

 private:
  std::mutex mu_;
  IoThread* io_;
};

class InprocSession final : public detail::Session {
 public:
  InprocSession(Role role, const TransportOptions& options, std::shared_ptr<TransportStats> stats,
                std::string name, std::shared_ptr<IoHandle> io)
      : Session(role, options, std::move(stats), std::move(name)), io_(std::move(io)) {}

  void link(const std::shared_ptr<InprocSession>& peer) { peer_ = peer; }
  IoHandle& io() { return *io_; }

 protected:
  absl::Status write_frame(Frame&& frame) override {
    std::shared_ptr<InprocSession> peer = peer_.lock();
    if (!peer || !peer->io().post({peer, std::move(frame)})) {
      return absl::UnavailableError("inproc peer is gone");
    }
    return absl::OkStatus();
  }
  void shutdown_channel() override {
    std::lock_guard<std::mutex> lock(shutdown_mu_);
    if (shut_down_) return;
    shut_down_ = true;
    if (std::shared_ptr<InprocSession> peer = peer_.lock()) peer->io().post({peer, std::nullopt});
    io_->post({std::static_pointer_cast<InprocSession>(shared_from_this()), std::nullopt});
  }

 private:
  std::shared_ptr<IoHandle> io_;
  std::weak_ptr<InprocSession> peer_;
  std::mutex shutdown_mu_;
  bool shut_down_ = false;
};

void IoThread::run() {
  for (;;) {
    Delivery d;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      d = std::move(queue_.front());
      queue_.pop_front();
    }
    if (d.frame) {
      d.target->on_frame_received(*d.frame);  // the sender's storage, lent on
      continue;
    }
    d.target->on_channel_closed(absl::UnavailableError("the peer closed the connection"));
    std::lock_guard<std::mutex> lock(mu_);
    std::erase(live_, d.target);
  }
}

IoThread::~IoThread() {
  std::vector<std::shared_ptr<InprocSession>> live;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_one();
  thread_.join();
  {
    std::lock_guard<std::mutex> lock(mu_);
    live.swap(live_);
  }
  for (auto& s : live)
    s->abort(absl::UnavailableError("the transport is shutting down"));
}

class InprocTransport;

// Listeners by name, process-wide.
struct Directory {
  std::mutex mu;
  absl::flat_hash_map<std::string, InprocTransport*> listeners;
};
Directory& directory() {
  static Directory* d = new Directory;
  return *d;
}

class InprocListener final : public Listener {
 public:
  InprocListener(std::string name) : name_(std::move(name)) {}
  ~InprocListener() override { close(); }
  std::string address() const override { return absl::StrCat(kSchemeText, name_); }
  void close() override {
    std::lock_guard<std::mutex> lock(directory().mu);
    directory().listeners.erase(name_);
  }

 private:
  std::string name_;
};

class InprocTransport final : public Transport {
 public:
  explicit InprocTransport(TransportOptions options)
      : options_(std::move(options)),
        thread_(std::make_unique<IoThread>()),
        io_(std::make_shared<IoHandle>(thread_.get())) {}
  // REQUIRES: not called from one of this transport's callbacks.
  ~InprocTransport() override {
    {
      std::lock_guard<std::mutex> lock(directory().mu);
      for (auto it = directory().listeners.begin(); it != directory().listeners.end();) {
        if (it->second == this) {
          directory().listeners.erase(it++);
        } else {
          ++it;
        }
      }
    }
    io_->detach();
    thread_.reset();
  }

  std::string_view name() const override { return "inproc"; }
  const TransportStats& stats() const override { return *stats_; }

  absl::StatusOr<std::unique_ptr<Listener>> listen(std::string_view address,
                                                   AcceptCallback on_accept) override {
    if (!address.starts_with(kScheme) || address.size() == kScheme.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "inproc address must look like inproc://NAME, not '", std::string(address), "'"));
    }
    std::string name(address.substr(kScheme.size()));
    std::lock_guard<std::mutex> lock(directory().mu);
    if (!directory().listeners.try_emplace(name, this).second) {
      return absl::UnavailableError(absl::StrCat("inproc://", name, " is already in use"));
    }
    {
      std::lock_guard<std::mutex> self(mu_);
      on_accept_ = std::move(on_accept);
    }
    return std::unique_ptr<Listener>(new InprocListener(std::move(name)));
  }

  absl::StatusOr<std::shared_ptr<Connection>> connect(std::string_view address,
                                                      ConnectionCallbacks callbacks,
                                                      absl::Duration timeout) override {
    std::string name(address.substr(std::min(address.size(), kScheme.size())));
    std::shared_ptr<InprocSession> client, server;
    {
      std::lock_guard<std::mutex> lock(directory().mu);
      auto it = directory().listeners.find(name);
      if (!address.starts_with(kScheme) || it == directory().listeners.end()) {
        return absl::UnavailableError(absl::StrCat("nothing listens on ", std::string(address)));
      }
      InprocTransport* remote = it->second;
      client = std::make_shared<InprocSession>(Role::kClient, options_, stats_,
                                               absl::StrCat("inproc client of ", name), io_);
      server = std::make_shared<InprocSession>(Role::kServer, remote->options_, remote->stats_,
                                               absl::StrCat("inproc ", name), remote->io_);
      server->set_accept(remote->accept_callback());
    }
    client->link(server);
    server->link(client);
    client->io().adopt(client);
    server->io().adopt(server);
    client->set_callbacks(std::move(callbacks));
    // The client's Hello goes first: the server must see it before the Proof
    // that the client sends in answer to the server's Hello.
    client->start();
    server->start();
    absl::Status ready = client->wait_ready(absl::Now() + timeout);
    if (!ready.ok()) return ready;
    return std::shared_ptr<Connection>(client);
  }

 private:
  AcceptCallback accept_callback() {
    std::lock_guard<std::mutex> lock(mu_);
    return on_accept_;
  }

  const TransportOptions options_;
  std::shared_ptr<TransportStats> stats_ = std::make_shared<TransportStats>();
  std::unique_ptr<IoThread> thread_;
  std::shared_ptr<IoHandle> io_;
  std::mutex mu_;
  AcceptCallback on_accept_;
};

}  // namespace

std::unique_ptr<Transport> make_transport(TransportOptions options) {
  return std::make_unique<InprocTransport>(std::move(options));
}

}  // namespace troupe::transport::inproc
