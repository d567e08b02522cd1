// A peer process for the transport tests, so that tests can kill it with
// SIGKILL. KIND is tcp or ucx. Modes:
//   transport_peer send KIND ADDRESS TOKEN   connect and send frames of a 1 MiB and a
//                                            32 MiB buffer until killed
//   transport_peer serve KIND TOKEN          listen on KIND://127.0.0.1:0, print the
//                                            address, echo frames until killed
// Either mode also ends when its standard input closes (the test went away)
// and after 60 seconds at most.
#include <poll.h>
#include <unistd.h>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

#include "tests/transport/transport_test_util.h"
#include "transport/connection.h"

using namespace troupe::transport;
using troupe::transport::testing::echo_callbacks;
using troupe::transport::testing::options_with;

int main(int argc, char** argv) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  if (argc == 5 && std::strcmp(argv[1], "send") == 0) {
    auto t = make_transport(argv[2], options_with(argv[4], "doomed sender"));
    if (!t.ok()) return 1;
    auto c = (*t)->connect(argv[3], ConnectionCallbacks{[](Frame&) {}, [](absl::Status) {}},
                           absl::Seconds(10));
    if (!c.ok()) {
      std::fprintf(stderr, "transport_peer: %s\n", c.status().ToString().c_str());
      return 1;
    }
    while (std::chrono::steady_clock::now() < deadline) {
      Frame f;
      for (size_t mib : {1, 32}) {
        f.buffers.emplace_back(mib << 20);
        std::memset(f.buffers.back().data(), 0x42, f.buffers.back().size());
      }
      if (!(*c)->send(std::move(f)).ok()) return 1;
    }
    return 0;
  }
  if (argc == 4 && std::strcmp(argv[1], "serve") == 0) {
    auto t = make_transport(argv[2], options_with(argv[3], "doomed server"));
    if (!t.ok()) return 1;
    auto l = (*t)->listen(std::string(argv[2]) + "://127.0.0.1:0", echo_callbacks);
    if (!l.ok()) return 1;
    std::printf("%s\n", (*l)->address().c_str());
    std::fflush(stdout);
    // Serve until the test closes our stdin (or dies), within the bound.
    pollfd in{STDIN_FILENO, POLLIN, 0};
    while (std::chrono::steady_clock::now() < deadline) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (::poll(&in, 1, static_cast<int>(left.count()) + 1) != 0) break;
    }
    return 0;
  }
  std::fprintf(stderr, "usage: transport_peer send KIND ADDRESS TOKEN | serve KIND TOKEN\n");
  return 2;
}
