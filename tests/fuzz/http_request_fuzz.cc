// libFuzzer target for the head's HTTP status endpoint: any bytes a client
// sends, fed to the server as it is configured (routes, timeouts, request
// bounds) without a socket, must get an answer or a closed connection, never
// a crash, a hang or an unbounded read.
#include <httplib.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "core/cluster/detail/http_status.h"

namespace {

// The request bytes in, the response bytes out (discarded).
class FuzzedStream final : public httplib::Stream {
 public:
  FuzzedStream(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool is_readable() const override { return true; }
  bool is_writable() const override { return true; }
  ssize_t read(char* out, size_t n) override {
    n = std::min(n, size_ - at_);
    std::memcpy(out, data_ + at_, n);
    at_ += n;
    return static_cast<ssize_t>(n);
  }
  ssize_t write(const char*, size_t n) override { return static_cast<ssize_t>(n); }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    ip = "127.0.0.1";
    port = 40000;
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    ip = "127.0.0.1";
    port = 8265;
  }
  socket_t socket() const override { return 0; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t at_ = 0;
};

// The head's server, with its protected request loop reachable.
class FuzzServer final : public httplib::Server {
 public:
  void serve(httplib::Stream& stream) {
    bool closed = false;
    process_request(stream, /*close_connection=*/true, closed, nullptr);
  }
};

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
  static FuzzServer* server = [] {
    auto* s = new FuzzServer();
    troupe::cluster::configure_status_routes(
        *s, [] { return absl::StatusOr<troupe::cluster::ClusterStatus>(sample_status()); });
    return s;
  }();
  FuzzedStream stream(data, size);
  server->serve(stream);
  return 0;
}
