// LocalEtcd: a single-member etcd (Debian's etcd-server) on loopback, in a
// scratch directory, for tests, benchmarks and examples of standby heads
// (`troupe head --store`). Killed, and its directory removed, when
// destroyed - and (PR_SET_PDEATHSIG) when this process dies.
//
//   auto etcd = LocalEtcd::start();
//   if (absl::IsNotFound(etcd.status())) { /* skip: no etcd installed */ }
//   LocalClusterOptions o{.store = "etcd://" + (*etcd)->host_port() + "/t/", .heads = 3};
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace troupe::cluster {

// The etcd executable installed here, or "" if none.
std::string find_etcd();

class LocalEtcd {
 public:
  // Starts one and waits until it answers. Its elections are quick (10 ms
  // heartbeats), so that it grants leases as short as asked from 150 ms.
  // Errors: NotFound (no etcd installed: Debian's etcd-server), Unavailable
  // (it did not answer within 20 s; its log is named).
  static absl::StatusOr<std::unique_ptr<LocalEtcd>> start();
  ~LocalEtcd();
  LocalEtcd(const LocalEtcd&) = delete;
  LocalEtcd& operator=(const LocalEtcd&) = delete;

  // "http://127.0.0.1:PORT".
  const std::string& endpoint() const { return endpoint_; }
  // "127.0.0.1:PORT", for etcd:// store addresses.
  std::string host_port() const { return endpoint_.substr(7); }
  pid_t pid() const { return pid_; }

 private:
  LocalEtcd() = default;
  pid_t pid_ = -1;
  std::string dir_;
  std::string endpoint_;
};

}  // namespace troupe::cluster
