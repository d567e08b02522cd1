// libFuzzer target for the head's HTTP status endpoint: any bytes a client
// sends, parsed and answered as the server does without a socket, must get
// an answer or an error status, never a crash, a hang or a read past the
// request bound.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "core/cluster/detail/http_request.h"
#include "core/cluster/detail/http_status.h"

namespace {

troupe::cluster::ClusterStatus sample_status() {
  troupe::cluster::ClusterStatus s;
  troupe::cluster::NodeStatus n;
  n.info.index = 1;
  n.info.name = "worker 127.0.0.1 pid 1";
  n.info.resources = "CPU=2";
  n.available = "CPU=1";
  s.nodes.push_back(n);
  troupe::cluster::ActorStatus a;
  a.id = 1;
  a.type = "Probe";
  s.actors.push_back(a);
  s.events.push_back("head started");
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace troupe::cluster;
  static const HttpSources sources{
      .status = [] { return absl::StatusOr<ClusterStatus>(sample_status()); },
      .job_metrics = [](uint32_t job) -> absl::StatusOr<JobMetrics> {
        if (job != 3) return absl::NotFoundError("no such job");
        JobMetrics m{.job = 3, .step = 7};
        m.latest = {{.name = "loss", .value = 1.5},
                    {.name = "memory_bytes", .labels = "rank=\"d0.p0.t0\"", .value = 8}};
        m.history = {{.step = 7, .points = {{.name = "loss", .value = 1.5}}}};
        m.events = {"step 7: checkpoint \"</script>\x01"};
        return m;
      }};
  std::string_view received(reinterpret_cast<const char*>(data), size);
  // As the server does: answer each whole request in turn (pipelined), stop
  // at an error or an incomplete head.
  for (int served = 0; served < kMaxRequestsPerConnection; ++served) {
    absl::StatusOr<std::optional<HttpRequest>> request = parse_http_request(received);
    if (!request.ok()) {
      std::string out = serialize(error_response(request.status()), false);
      if (out.rfind("HTTP/1.1 4", 0) != 0 && out.rfind("HTTP/1.1 5", 0) != 0) std::abort();
      return 0;
    }
    if (!request->has_value()) {
      if (received.size() >= kMaxRequestBytes) std::abort();  // must have been refused
      return 0;
    }
    const HttpRequest& r = **request;
    if (r.head_bytes == 0 || r.head_bytes > received.size() || r.head_bytes > kMaxRequestBytes) {
      std::abort();
    }
    std::string out = serialize(answer(r, sources), r.keep_alive, r.method == "HEAD");
    if (out.rfind("HTTP/1.1 ", 0) != 0) std::abort();
    received.remove_prefix(r.head_bytes);
  }
  return 0;
}
