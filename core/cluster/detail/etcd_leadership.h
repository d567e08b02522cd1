// Leading the cluster, one head at a time, on etcd: the leader is whoever
// created the leader key, attached to a lease it keeps renewing; the others
// stand by and campaign again when the key goes (the lease lapsed: the leader
// died, hung, or lost etcd). The key's create revision is the leader's epoch -
// it only grows - and every write a leader makes is a transaction on "the
// leader key still has my epoch": a leader that was paused (SIGSTOP, a long
// GC-like stall) and wakes after another took over can never write again.
//
//   EtcdLeadership head(*EtcdClient::connect({"http://10.0.0.1:2379"}),
//                       {.name = "head 10.0.0.5:6380"});
//   absl::StatusOr<int64_t> epoch = head.campaign(absl::InfiniteDuration());
//   head.write({EtcdOp::put("troupe/jobs/7", record)});  // FailedPrecondition once deposed
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/cluster/detail/etcd_client.h"

namespace troupe::cluster {

struct LeadershipOptions {
  std::string key = "troupe/leader";  // whose value names the leader
  std::string name;                   // this candidate, as the key's value
  // The lease's TTL: how long a dead leader keeps the role. Renewed every
  // third of it.
  absl::Duration ttl = absl::Seconds(3);
};

class EtcdLeadership {
 public:
  EtcdLeadership(EtcdClient etcd, LeadershipOptions options);
  // Resigns if leading.
  ~EtcdLeadership();
  EtcdLeadership(const EtcdLeadership&) = delete;
  EtcdLeadership& operator=(const EtcdLeadership&) = delete;

  // Waits until this candidate leads, or `timeout`: its epoch. A candidate
  // that leads already returns its epoch. DeadlineExceeded naming the
  // leader; Unavailable when etcd cannot be reached for the whole timeout.
  absl::StatusOr<int64_t> campaign(absl::Duration timeout);
  // Whether this candidate led at its last renewal (within a third of the
  // TTL). A leader that stops leading - its lease lapsed, it was deposed,
  // or etcd did not answer its renewals for a whole TTL - finds out here
  // and through write().
  bool leading() const { return leading_.load(); }
  int64_t epoch() const { return epoch_.load(); }
  // Runs `ops` only while the leader key still holds this candidate's epoch.
  // FailedPrecondition when it does not (another leads, or none); the
  // errors of etcd otherwise.
  absl::StatusOr<EtcdTxnResult> write(std::vector<EtcdOp> ops);
  // The leader now (the key's value); nullopt if none.
  absl::StatusOr<std::optional<std::string>> leader();
  // Gives the role up at once (the lease is revoked, so a standby need not
  // wait out the TTL).
  void resign();
  // Stops renewing without giving the role up, as a paused process would:
  // the lease lapses after its TTL. For tests.
  void stop_renewing();

 private:
  void renew_loop();
  void stop_renewal_thread();

  EtcdClient etcd_;
  const LeadershipOptions options_;
  EtcdClient renewing_;  // etcd_'s endpoints, its requests bounded by a third of the TTL
  std::atomic<bool> leading_{false};
  std::atomic<int64_t> epoch_{0};
  std::atomic<int64_t> lease_{0};

  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;  // guarded by mu_
  std::thread renewer_;
};

}  // namespace troupe::cluster
