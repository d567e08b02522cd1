// The head's HTTP endpoint (Ray's dashboard port, 8265 by default):
//   GET /metrics   Prometheus text: nodes, actors by state, placement groups
//   GET /          the cluster status as plain text (what `troupe status` shows)
// Served by cpp-httplib with a small pool of threads (a slow or idle client
// holds one for at most a few seconds, and requests are at most 8 KiB);
// nothing here changes the cluster. It binds the head's host, so by default
// only local processes reach it. docs/security.md has what it exposes.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "core/cluster/protocol.h"

namespace httplib {
class Server;
}  // namespace httplib

namespace troupe::cluster {

// Where the endpoints read the cluster's status from (the head's service).
using StatusSource = std::function<absl::StatusOr<ClusterStatus>()>;

class HttpStatusServer {
 public:
  // Serves on host:port (0: any free port) with `status` as the source.
  static absl::StatusOr<std::unique_ptr<HttpStatusServer>> start(const std::string& host,
                                                                 uint16_t port,
                                                                 StatusSource status);
  ~HttpStatusServer();
  uint16_t port() const { return port_; }

 private:
  HttpStatusServer() = default;

  uint16_t port_ = 0;
  std::unique_ptr<httplib::Server> http_;
  std::thread thread_;
};

// Sets `http` up to serve the endpoints above from `status`, within the
// bounds of docs/security.md: what HttpStatusServer serves, and what the
// HTTP fuzz target feeds requests to without a socket.
void configure_status_routes(httplib::Server& http, StatusSource status);

// The cluster status in the Prometheus text format.
std::string render_metrics(const ClusterStatus& s);
// The cluster status as the table `troupe status` prints.
std::string render_status(const ClusterStatus& s);

}  // namespace troupe::cluster
