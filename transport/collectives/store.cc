#include "transport/collectives/store.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace troupe::transport {

absl::Status InMemoryStore::set(const std::string& key, std::string value) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    values_[key] = std::move(value);
  }
  changed_.notify_all();
  return absl::OkStatus();
}

absl::StatusOr<std::string> InMemoryStore::wait_get(const std::string& key,
                                                    absl::Duration timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  bool found = changed_.wait_until(lock, absl::ToChronoTime(absl::Now() + timeout),
                                   [&] { return values_.contains(key); });
  if (!found) {
    return absl::DeadlineExceededError(
        absl::StrCat("rendezvous: '", key, "' was not set within ", absl::FormatDuration(timeout)));
  }
  return values_[key];
}

}  // namespace troupe::transport
