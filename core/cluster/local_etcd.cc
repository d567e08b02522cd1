#include "core/cluster/local_etcd.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/cluster/detail/etcd_client.h"
#include "core/cluster/local_cluster.h"

namespace troupe::cluster {

std::string find_etcd() {
  for (const char* dir : {"/usr/bin", "/usr/local/bin", "/usr/sbin"}) {
    std::string path = absl::StrCat(dir, "/etcd");
    if (::access(path.c_str(), X_OK) == 0) return path;
  }
  return "";
}

absl::StatusOr<std::unique_ptr<LocalEtcd>> LocalEtcd::start() {
  const std::string etcd = find_etcd();
  if (etcd.empty()) return absl::NotFoundError("no etcd installed (Debian: etcd-server)");
  std::unique_ptr<LocalEtcd> e(new LocalEtcd());
  std::string dir = (std::filesystem::temp_directory_path() / "troupe-etcd-XXXXXX").string();
  if (::mkdtemp(dir.data()) == nullptr) return absl::InternalError("mkdtemp failed");
  e->dir_ = dir;
  const uint16_t client = free_loopback_port();
  const uint16_t peer = free_loopback_port();
  if (client == 0 || peer == 0) return absl::UnavailableError("no free port for etcd");
  e->endpoint_ = absl::StrCat("http://127.0.0.1:", client);
  const std::string peer_url = absl::StrCat("http://127.0.0.1:", peer);
  const std::string data = dir + "/data";
  const std::string log = dir + "/etcd.log";
  const std::string cluster = "default=" + peer_url;
  const pid_t parent = ::getpid();
  e->pid_ = ::fork();
  if (e->pid_ < 0) return absl::InternalError("fork failed");
  if (e->pid_ == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    FILE* out = std::freopen(log.c_str(), "w", stderr);
    static_cast<void>(out);
    ::execl(etcd.c_str(), "etcd", "--data-dir", data.c_str(), "--listen-client-urls",
            e->endpoint_.c_str(), "--advertise-client-urls", e->endpoint_.c_str(),
            "--listen-peer-urls", peer_url.c_str(), "--initial-advertise-peer-urls",
            peer_url.c_str(), "--initial-cluster", cluster.c_str(),
            // One member: quick elections, so that short leases are granted
            // as asked (etcd's shortest lease is 15 heartbeats).
            "--heartbeat-interval", "10", "--election-timeout", "100", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  auto c = EtcdClient::connect({e->endpoint_}, absl::Seconds(2));
  if (!c.ok()) return c.status();
  for (absl::Time deadline = absl::Now() + absl::Seconds(20); absl::Now() < deadline;
       absl::SleepFor(absl::Milliseconds(100))) {
    if (c->get("troupe/probe").ok()) return e;
  }
  return absl::UnavailableError(absl::StrCat("etcd did not come up within 20 s; see ", log));
}

LocalEtcd::~LocalEtcd() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  std::error_code ignored;
  if (!dir_.empty()) std::filesystem::remove_all(dir_, ignored);
}

}  // namespace troupe::cluster
