// A real etcd (Debian's etcd-server) on loopback for a test suite: started
// once per test process in a scratch directory, killed after; every test
// starts on an empty key space with a client in client_. A test skips,
// saying so, where no etcd is installed.
#pragma once

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/cluster/detail/etcd_client.h"
#include "tests/common/free_port.h"

namespace troupe::cluster {

using ::troupe::testing::free_loopback_port;

inline std::string find_etcd() {
  for (const char* dir : {"/usr/bin", "/usr/local/bin", "/usr/sbin"}) {
    std::string path = absl::StrCat(dir, "/etcd");
    if (::access(path.c_str(), X_OK) == 0) return path;
  }
  return "";
}

class EtcdTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string etcd = find_etcd();
    if (etcd.empty()) return;
    dir_ = new std::filesystem::path(std::filesystem::temp_directory_path() /
                                     absl::StrCat("troupe-etcd-test-", ::getpid()));
    std::filesystem::create_directories(*dir_);
    uint16_t client = free_loopback_port();
    uint16_t peer = free_loopback_port();
    endpoint_ = new std::string(absl::StrCat("http://127.0.0.1:", client));
    std::string peer_url = absl::StrCat("http://127.0.0.1:", peer);
    std::string data = (*dir_ / "data").string();
    std::string log = (*dir_ / "etcd.log").string();
    pid_ = ::fork();
    if (pid_ == 0) {
      FILE* out = std::freopen(log.c_str(), "w", stderr);
      static_cast<void>(out);
      ::execl(etcd.c_str(), "etcd", "--data-dir", data.c_str(), "--listen-client-urls",
              endpoint_->c_str(), "--advertise-client-urls", endpoint_->c_str(),
              "--listen-peer-urls", peer_url.c_str(), "--initial-advertise-peer-urls",
              peer_url.c_str(), "--initial-cluster", ("default=" + peer_url).c_str(),
              // One member: quick elections, so that leases as short as
              // the tests' (1 s) are granted as asked (etcd's shortest
              // lease is 15 heartbeats).
              "--heartbeat-interval", "10", "--election-timeout", "100",
              static_cast<char*>(nullptr));
      ::_exit(127);
    }
    // Up when it answers a read.
    auto c = EtcdClient::connect({*endpoint_}, absl::Seconds(2));
    for (absl::Time deadline = absl::Now() + absl::Seconds(20); absl::Now() < deadline;) {
      if (c->get("troupe/probe").ok()) {
        up_ = true;
        break;
      }
      absl::SleepFor(absl::Milliseconds(100));
    }
  }
  static void TearDownTestSuite() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (dir_ != nullptr) std::filesystem::remove_all(*dir_);
  }
  void SetUp() override {
    if (pid_ <= 0) GTEST_SKIP() << "skipped: no etcd installed (Debian: etcd-server)";
    ASSERT_TRUE(up_) << "etcd did not come up; see " << (*dir_ / "etcd.log");
    auto c = EtcdClient::connect({*endpoint_});
    ASSERT_TRUE(c.ok()) << c.status();
    client_.emplace(*std::move(c));
    // Each test on a clean key space.
    ASSERT_TRUE(client_->delete_prefix("").ok());
  }

  // "HOST:PORT" of the etcd.
  static std::string host_port() { return endpoint_->substr(std::string("http://").size()); }

  static inline pid_t pid_ = -1;
  static inline bool up_ = false;
  static inline std::string* endpoint_ = nullptr;
  static inline std::filesystem::path* dir_ = nullptr;
  std::optional<EtcdClient> client_;
};

}  // namespace troupe::cluster
