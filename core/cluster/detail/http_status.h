// The head's HTTP endpoint (Ray's dashboard port, 8265 by default):
//   GET /              the dashboard: one self-contained page (dashboard_page.h)
//                      that reads the two /api/ paths and draws the cluster and
//                      each job's curves, step times, memory and events
//   GET /status        the cluster status as plain text (what `troupe status`
//                      shows, each worker's GPUs and each job's progress)
//   GET /metrics       Prometheus text: nodes, resources, GPUs, actors by state,
//                      placement groups, and what training jobs report
//                      (troupe_train_*: loss, throughput, step time, memory, ...)
//   GET /api/status    the cluster status as JSON (http_json.h)
//   GET /api/jobs/ID   what job ID reported, with its history, as JSON
// Served from one I/O thread (asio): a connection costs a socket and a
// buffer of at most kMaxRequestBytes, never a thread, so idle or slow clients
// do not hold up a scrape. Each has kClientTimeout to send a request (and to
// take its answer); past kMaxHttpConnections open at once, the oldest
// is closed to make room. What a request needs (the status, or a job's
// metrics) is asked of its source on a thread of its own, one asking serving
// every request waiting for the same, so a slow head holds up only those.
// Nothing here changes the cluster. It binds the address it is given (the
// head's --http-host, loopback by default). docs/security.md has what it
// exposes.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/cluster/detail/http_request.h"
#include "core/cluster/protocol.h"

namespace troupe::cluster {

// Bounds on what clients of the HTTP status hold (docs/security.md).
inline constexpr absl::Duration kClientTimeout = absl::Seconds(2);
inline constexpr size_t kMaxHttpConnections = 512;
inline constexpr int kMaxRequestsPerConnection = 100;

// Where the endpoints read the cluster's status from (the head's service).
using StatusSource = std::function<absl::StatusOr<ClusterStatus>()>;
// Where /api/jobs/ID reads a job's metrics from (the head's service).
using JobMetricsSource = std::function<absl::StatusOr<JobMetrics>(uint32_t job)>;
struct HttpSources {
  StatusSource status;
  JobMetricsSource job_metrics;  // may be empty: /api/jobs/ answers 404
};

// What a request needs fetched before it can be answered.
struct HttpRoute {
  enum Needs { kNothing, kStatus, kJob } needs = kNothing;
  uint32_t job = 0;  // kJob: which
};
HttpRoute route_of(const HttpRequest& request);
// What was fetched for a request: the status, or a job's metrics (the other Unavailable).
struct HttpFetched {
  absl::StatusOr<ClusterStatus> status = absl::UnavailableError("not asked");
  absl::StatusOr<JobMetrics> job = absl::UnavailableError("not asked");
};

class HttpStatusServer {
 public:
  // Serves on host:port (0: any free port) from `sources`.
  // Errors: Unavailable naming the address when it cannot listen there.
  static absl::StatusOr<std::unique_ptr<HttpStatusServer>> start(const std::string& host,
                                                                 uint16_t port,
                                                                 HttpSources sources);
  ~HttpStatusServer();
  uint16_t port() const;

 private:
  class Impl;
  explicit HttpStatusServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The answer to a parsed request, fetching what its route needs from `sources` (503 when a
// source fails, 404 for a job it does not know or a path that is not served).
HttpResponse answer(const HttpRequest& request, const HttpSources& sources);
// The same from what was already fetched for it (route_of says what).
HttpResponse answer(const HttpRequest& request, const HttpFetched& fetched);

// The cluster status in the Prometheus text format, the jobs' reported values among it
// (render_job_metrics).
std::string render_metrics(const ClusterStatus& s);
// The jobs' latest reported values (Cluster::report_metrics) as the troupe_train_ families, one
// family per name with a sample per job (label job="<id>" before the reported labels); a name
// ending in "_total" is a counter, the rest gauges. A value whose name or labels are not what
// the text format takes is left out. Appended to *out.
void render_job_metrics(const ClusterStatus& s, std::string* out);
// A worker's resources in use out of its total, for people: "CPU 1/2, GPU 0/1, memory 2 GiB/8 GiB".
std::string resource_usage(const std::string& total, const std::string& available);
// The cluster status as the table `troupe status` prints.
std::string render_status(const ClusterStatus& s);

}  // namespace troupe::cluster
