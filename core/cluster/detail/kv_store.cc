#include "core/cluster/detail/kv_store.h"

#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace troupe::cluster {

absl::Status HeadKvStore::set(const std::string& key, std::string value) {
  absl::StatusOr<bool> put =
      head_.call(&HeadService::kv_put, key, std::move(value), true).get(call_timeout_);
  return put.status();
}

absl::StatusOr<std::string> HeadKvStore::wait_get(const std::string& key, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::Duration pause = absl::Milliseconds(1);
  for (;;) {
    absl::StatusOr<std::optional<std::string>> got =
        head_.call(&HeadService::kv_get, key).get(call_timeout_);
    if (!got.ok()) return got.status();
    if (got->has_value()) return **std::move(got);
    absl::Time now = absl::Now();
    if (now >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "'", key, "' was not set in the head's KV store within ", absl::FormatDuration(timeout)));
    }
    absl::SleepFor(std::min(pause, deadline - now));
    pause = std::min(pause * 2, absl::Milliseconds(50));
  }
}

}  // namespace troupe::cluster
