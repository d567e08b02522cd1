// A flood of peers that connect and say nothing: `per_listener` TCP
// connections to every listener of some processes (found in /proc, so the
// listeners a process opens during the flood are flooded too), reopened as
// the listeners close them, until the flood is stopped or `longest` passed.
// For the tests of what unauthenticated peers can and cannot do
// (docs/security.md). Loopback only.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include <atomic>
#include <map>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "tests/cluster/listeners.h"

namespace troupe::cluster::testing {

class SilentFlood {
 public:
  SilentFlood(std::vector<pid_t> pids, int per_listener, absl::Duration longest = absl::Minutes(5))
      : pids_(std::move(pids)), per_listener_(per_listener), until_(absl::Now() + longest) {
    thread_ = std::thread([this] { run(); });
  }
  ~SilentFlood() { stop(); }

  void stop() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
  }
  // Listeners flooded so far, and connections opened to them.
  int listeners() const { return listeners_.load(); }
  int64_t opened() const { return opened_.load(); }
  // Until `n` listeners have had their full share of connections at once.
  bool wait_flooding(int n, absl::Duration timeout) const {
    const absl::Time deadline = absl::Now() + timeout;
    while (absl::Now() < deadline) {
      if (listeners_full_.load() >= n) return true;
      absl::SleepFor(absl::Milliseconds(20));
    }
    return false;
  }

 private:
  static int connect_to(uint16_t port) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      ::close(fd);
      return -1;
    }
    return fd;
  }

  // Reads and drops what the listener sent (a Hello); false once it closed.
  static bool still_open(int fd) {
    char buffer[4096];
    for (int reads = 0; reads < 16; ++reads) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 0) <= 0) return true;
      ssize_t n = ::recv(fd, buffer, sizeof(buffer), MSG_DONTWAIT);
      if (n <= 0) return false;
    }
    return true;
  }

  void run() {
    std::map<uint16_t, std::vector<int>> open;
    absl::Time next_scan = absl::InfinitePast();
    while (!stop_.load() && absl::Now() < until_) {
      if (absl::Now() >= next_scan) {
        for (pid_t pid : pids_) {
          for (const ListeningSocket& l : listening_sockets(pid))
            open[l.port];  // a listener to flood from now on
        }
        next_scan = absl::Now() + absl::Milliseconds(250);
      }
      int full = 0;
      for (auto& [port, fds] : open) {
        std::erase_if(fds, [](int fd) {
          if (still_open(fd)) return false;
          ::close(fd);
          return true;
        });
        while (static_cast<int>(fds.size()) < per_listener_) {
          int fd = connect_to(port);
          if (fd < 0) break;  // gone (its process ended): tried again next round
          fds.push_back(fd);
          opened_.fetch_add(1);
        }
        full += static_cast<int>(fds.size()) >= per_listener_ ? 1 : 0;
      }
      listeners_.store(static_cast<int>(open.size()));
      listeners_full_.store(full);
      absl::SleepFor(absl::Milliseconds(20));
    }
    for (auto& [port, fds] : open) {
      for (int fd : fds)
        ::close(fd);
    }
  }

  const std::vector<pid_t> pids_;
  const int per_listener_;
  const absl::Time until_;
  std::atomic<bool> stop_{false};
  std::atomic<int> listeners_{0};
  std::atomic<int> listeners_full_{0};
  std::atomic<int64_t> opened_{0};
  std::thread thread_;
};

}  // namespace troupe::cluster::testing
