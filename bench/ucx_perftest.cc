#include "bench/ucx_perftest.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <thread>
#include <vector>

namespace troupe::bench {
namespace {

uint16_t free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// The numbers on ucx_perftest's "Final:" line: iterations, latency 50%ile,
// average, overall (usec), bandwidth average, overall (MB/s), message rates.
std::vector<double> run(const std::string& tls, const std::string& test, size_t size, long n,
                        bool error_handling) {
  std::string env = tls.empty() ? "" : "UCX_TLS=" + tls + " ";
  std::string args = " -t " + test + " -s " + std::to_string(size) + " -n " + std::to_string(n) +
                     " -p " + std::to_string(free_port()) + (error_handling ? " -e" : "");
  FILE* server = ::popen((env + "ucx_perftest" + args + " 2>&1").c_str(), "r");
  if (server == nullptr) return {};
  std::vector<double> numbers;
  // The client retries until the server listens (bounded: 50 tries).
  for (int attempt = 0; attempt < 50 && numbers.empty(); ++attempt) {
    FILE* client = ::popen((env + "ucx_perftest 127.0.0.1" + args + " 2>&1").c_str(), "r");
    if (client == nullptr) break;
    char line[1024];
    while (std::fgets(line, sizeof(line), client) != nullptr) {
      std::string s(line);
      size_t at = s.find("Final:");
      if (at == std::string::npos) continue;
      std::istringstream in(s.substr(at + 6));
      double v;
      while (in >> v)
        numbers.push_back(v);
    }
    ::pclose(client);
    if (numbers.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ::pclose(server);
  return numbers;
}

}  // namespace

bool ucx_perftest_available() {
  return std::system("command -v ucx_perftest >/dev/null 2>&1") == 0;
}

double perftest_rtt_us(const std::string& tls, long iterations, bool error_handling, bool mean) {
  std::vector<double> v = run(tls, "ucp_am_lat", 8, iterations, error_handling);
  const size_t at = mean ? 3 : 1;
  return v.size() > at ? 2 * v[at] : 0;
}

double perftest_bandwidth(const std::string& tls, size_t size, long iterations,
                          bool error_handling) {
  std::vector<double> v = run(tls, "ucp_am_bw", size, iterations, error_handling);
  return v.size() >= 5 ? v[4] * 1024 * 1024 : 0;
}

}  // namespace troupe::bench
