// The head's HTTP endpoint (Ray's dashboard port, 8265 by default):
//   GET /metrics   Prometheus text: nodes, actors by state, placement groups
//   GET /          the cluster status as plain text (what `troupe status` shows)
// HTTP/1.0, one request per connection, served by one thread; nothing here
// changes the cluster. It binds the head's host, so by default only local
// processes reach it.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "core/cluster/protocol.h"

namespace troupe::cluster {

class HttpStatusServer {
 public:
  // Serves on host:port (0: any free port) with `status` as the source.
  static absl::StatusOr<std::unique_ptr<HttpStatusServer>> start(
      const std::string& host, uint16_t port,
      std::function<absl::StatusOr<ClusterStatus>()> status);
  ~HttpStatusServer();
  uint16_t port() const { return port_; }

 private:
  HttpStatusServer() = default;
  void serve();
  std::string respond(const std::string& path);

  int fd_ = -1;
  uint16_t port_ = 0;
  std::function<absl::StatusOr<ClusterStatus>()> status_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// The cluster status in the Prometheus text format.
std::string render_metrics(const ClusterStatus& s);
// The cluster status as the table `troupe status` prints.
std::string render_status(const ClusterStatus& s);

}  // namespace troupe::cluster
