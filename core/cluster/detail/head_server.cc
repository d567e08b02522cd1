// The head process's side of the head: its node, the clock that drives the
// failure detector, and the thread that opens the head's connections to
// workers that became ready.
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/cluster/detail/head.h"
#include "spdlog/spdlog.h"

namespace troupe::cluster {

absl::StatusOr<std::unique_ptr<HeadServer>> HeadServer::start(HeadOptions options) {
  std::unique_ptr<HeadServer> server(new HeadServer());
  auto node = Node::start({.index = kHeadNode,
                           .token = options.token,
                           .name = "head",
                           .host = options.host,
                           .transports = {"tcp"},
                           .tcp_port = options.port,
                           .threads = options.threads,
                           // Heartbeats come steadily, a little apart: spinning
                           // between them would burn the head's cores.
                           .spin = false});
  if (!node.ok()) {
    return absl::Status(node.status().code(),
                        absl::StrCat("cannot listen on ", options.host, ":", options.port, ": ",
                                     node.status().message()));
  }
  server->node_ = *std::move(node);
  std::shared_ptr<HeadStore> store =
      options.store ? options.store
                    : std::shared_ptr<HeadStore>(state_dir_store(options.state_dir));
  absl::StatusOr<HeadIds> ids = HeadIds::open(store);
  if (!ids.ok()) return ids.status();
  absl::StatusOr<HeadRecords> restored = load_head_records(*store);
  if (!restored.ok()) return restored.status();
  server->records_ =
      std::make_shared<RecordWriter>(store, [failed = options.on_store_failure](absl::Status s) {
        spdlog::error("head: cannot keep its records: {}", s.ToString());
        if (failed) failed(std::move(s));
      });
  ids->write_through(server->records_);
  // Distinct for every start of a head (0 is never one).
  uint64_t incarnation = (static_cast<uint64_t>(absl::ToUnixNanos(absl::Now())) ^
                          (static_cast<uint64_t>(::getpid()) << 40)) |
                         1;
  HeadServer* s = server.get();
  auto watch = [s](uint32_t index) {
    {
      std::lock_guard<std::mutex> lock(s->watch_mu_);
      s->to_watch_.push_back(index);
    }
    s->watch_cv_.notify_one();
  };
  auto service = server->node_->system().spawn_at<HeadService>(
      head_service_id(), {.name = "head"}, server->node_.get(), options.config, server->stopped_,
      *std::move(ids), incarnation, std::function<void(uint32_t)>(watch), server->records_,
      *std::move(restored));
  if (!service.ok()) return service.status();
  server->service_ = *service;
  // The head's own connections to the nodes it placed actors on (TCP) break
  // the moment such a node's process dies: it is declared dead then, not a
  // heartbeat budget later.
  server->node_->set_hooks({.peer_lost = [head = *service](uint32_t peer, absl::Status why) {
    head.tell(&HeadService::report_lost, kHeadNode, peer, std::string(why.message()));
  }});
  absl::Duration period = std::min(options.config.heartbeat_interval, kTickPeriod);
  server->clock_ = std::thread([s, period] {
    while (!s->done_.load()) {
      s->service_.tell(&HeadService::tick);
      absl::SleepFor(period);
    }
  });
  server->watcher_ = std::thread([s] { s->watch_nodes(); });
  return server;
}

void HeadServer::watch_nodes() {
  for (;;) {
    uint32_t node = 0;
    {
      std::unique_lock<std::mutex> lock(watch_mu_);
      watch_cv_.wait(lock, [&] { return done_.load() || !to_watch_.empty(); });
      if (done_.load()) return;
      node = to_watch_.front();
      to_watch_.pop_front();
    }
    // One that cannot be reached now is left to its heartbeats.
    absl::Status s = node_->connect(node);
    if (!s.ok()) spdlog::debug("head: no connection to node {}: {}", node, s.ToString());
  }
}

HeadServer::~HeadServer() {
  {
    std::lock_guard<std::mutex> lock(watch_mu_);
    done_.store(true);
  }
  watch_cv_.notify_all();
  if (watcher_.joinable()) watcher_.join();
  if (clock_.joinable()) clock_.join();
  node_.reset();
}

std::string HeadServer::address() const {
  return node_->endpoints().front();
}

bool HeadServer::wait_stopped(absl::Duration timeout) {
  absl::Time deadline = absl::Now() + timeout;
  while (!stopped_->load()) {
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return true;
}

}  // namespace troupe::cluster
