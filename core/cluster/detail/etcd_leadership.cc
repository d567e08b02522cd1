#include "core/cluster/detail/etcd_leadership.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "spdlog/spdlog.h"

namespace troupe::cluster {

EtcdLeadership::EtcdLeadership(EtcdClient etcd, LeadershipOptions options)
    : etcd_(std::move(etcd)),
      options_(std::move(options)),
      // A renewal must not wait longer than the lease lasts.
      renewing_(EtcdClient::connect(etcd_.endpoints(), options_.ttl / 3).value_or(etcd_)) {}

EtcdLeadership::~EtcdLeadership() {
  resign();
}

absl::StatusOr<int64_t> EtcdLeadership::campaign(absl::Duration timeout) {
  if (leading_.load()) return epoch_.load();
  const absl::Time deadline = absl::Now() + timeout;
  absl::Status last = absl::DeadlineExceededError("no attempt");
  std::string holder;
  for (;;) {
    absl::StatusOr<int64_t> lease = etcd_.grant_lease(options_.ttl);
    if (lease.ok()) {
      EtcdTxn take;
      take.compares.push_back(EtcdCompare::absent(options_.key));
      take.success.push_back(EtcdOp::put(options_.key, options_.name, *lease));
      take.success.push_back(EtcdOp::get(options_.key));
      take.failure.push_back(EtcdOp::get(options_.key));
      absl::StatusOr<EtcdTxnResult> r = etcd_.txn(take);
      if (r.ok() && r->succeeded && !r->ranges.empty() && !r->ranges[0].empty()) {
        // Leading: the key's create revision is the epoch.
        stop_renewal_thread();
        epoch_.store(r->ranges[0][0].create_revision);
        lease_.store(*lease);
        leading_.store(true);
        {
          std::lock_guard<std::mutex> lock(mu_);
          stop_ = false;
        }
        renewer_ = std::thread([this] { renew_loop(); });
        return epoch_.load();
      }
      static_cast<void>(etcd_.revoke_lease(*lease));
      if (r.ok()) {
        holder = !r->ranges.empty() && !r->ranges[0].empty() ? r->ranges[0][0].value : "";
        last = absl::DeadlineExceededError(
            absl::StrCat(holder.empty() ? std::string("another head") : holder, " leads"));
      } else {
        last = r.status();
      }
    } else {
      last = lease.status();
    }
    if (absl::Now() >= deadline) return last;
    // The holder's lease must lapse first: look again soon after.
    absl::SleepFor(
        std::min(options_.ttl / 10, std::max(deadline - absl::Now(), absl::ZeroDuration())));
  }
}

void EtcdLeadership::renew_loop() {
  const absl::Duration every = options_.ttl / 3;
  // When the last renewal that succeeded was sent: the lease lasts the TTL
  // from then at most, in etcd's eyes.
  absl::Time renewed = absl::Now();
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, absl::ToChronoNanoseconds(every), [this] { return stop_; });
    if (stop_) return;
    lock.unlock();
    const absl::Time sent = absl::Now();
    absl::Status s = renewing_.keep_alive(lease_.load());
    lock.lock();
    if (s.ok()) {
      renewed = sent;
      continue;
    }
    if (absl::IsNotFound(s) || absl::Now() - renewed >= options_.ttl) {
      // The lease lapsed (we could not renew it in time), or may have (etcd
      // has not answered for a whole TTL): no longer leading - a standby
      // that can reach etcd may lead now.
      leading_.store(false);
      spdlog::warn("{}: lost the lead (epoch {}): {}", options_.name, epoch_.load(), s.ToString());
      return;
    }
    spdlog::warn("{}: cannot renew the lead: {}", options_.name, s.ToString());
  }
}

void EtcdLeadership::stop_renewal_thread() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (renewer_.joinable()) renewer_.join();
}

absl::StatusOr<EtcdTxnResult> EtcdLeadership::write(std::vector<EtcdOp> ops) {
  const int64_t epoch = epoch_.load();
  if (epoch == 0) return absl::FailedPreconditionError("this head has not led");
  EtcdTxn t;
  t.compares.push_back(
      {.key = options_.key, .target = EtcdCompare::Target::kCreateRevision, .number = epoch});
  t.success = std::move(ops);
  t.failure.push_back(EtcdOp::get(options_.key));
  absl::StatusOr<EtcdTxnResult> r = etcd_.txn(t);
  if (!r.ok()) return r.status();
  if (!r->succeeded) {
    leading_.store(false);
    std::string now = !r->ranges.empty() && !r->ranges[0].empty()
                          ? absl::StrCat(r->ranges[0][0].value, " leads (epoch ",
                                         r->ranges[0][0].create_revision, ")")
                          : std::string("no head leads");
    return absl::FailedPreconditionError(
        absl::StrCat(options_.name, " no longer leads (its epoch was ", epoch, "): ", now));
  }
  return r;
}

absl::StatusOr<std::optional<std::string>> EtcdLeadership::leader() {
  absl::StatusOr<std::optional<EtcdKv>> kv = etcd_.get(options_.key);
  if (!kv.ok()) return kv.status();
  if (!kv->has_value()) return std::nullopt;
  return (*kv)->value;
}

void EtcdLeadership::resign() {
  stop_renewal_thread();
  if (leading_.exchange(false)) static_cast<void>(etcd_.revoke_lease(lease_.load()));
}

void EtcdLeadership::stop_renewing() {
  stop_renewal_thread();
}

}  // namespace troupe::cluster
