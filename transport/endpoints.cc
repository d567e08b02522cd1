#include "transport/endpoints.h"

#include <algorithm>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace troupe::transport {
namespace {

// Position in kPreferredKinds, or -1.
int rank_of(std::string_view kind) {
  auto it = std::find(std::begin(kPreferredKinds), std::end(kPreferredKinds), kind);
  return it == std::end(kPreferredKinds) ? -1 : static_cast<int>(it - std::begin(kPreferredKinds));
}

bool retry_elsewhere(const absl::Status& s) {
  return absl::IsUnavailable(s) || absl::IsNotFound(s) || absl::IsDeadlineExceeded(s);
}

}  // namespace

std::string_view kind_of(std::string_view address) {
  size_t at = address.find("://");
  return at == std::string_view::npos ? std::string_view() : address.substr(0, at);
}

std::vector<std::string> rank_endpoints(const std::vector<std::string>& advertised,
                                        const std::vector<std::string>& usable) {
  std::vector<std::string> out;
  for (const std::string& a : advertised) {
    std::string_view kind = kind_of(a);
    if (rank_of(kind) >= 0 && std::find(usable.begin(), usable.end(), kind) != usable.end()) {
      out.push_back(a);
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const std::string& x, const std::string& y) {
    return rank_of(kind_of(x)) < rank_of(kind_of(y));
  });
  return out;
}

absl::StatusOr<std::shared_ptr<Connection>> connect_best(
    const std::map<std::string, Transport*, std::less<>>& transports,
    const std::vector<std::string>& advertised, const ConnectionCallbacks& callbacks,
    absl::Duration timeout) {
  std::vector<std::string> kinds;
  for (const auto& [kind, t] : transports) {
    if (t != nullptr) kinds.push_back(kind);
  }
  std::vector<std::string> ranked = rank_endpoints(advertised, kinds);
  if (ranked.empty()) {
    return absl::NotFoundError(absl::StrCat("no usable endpoint among [",
                                            absl::StrJoin(advertised, ", "), "] for transports [",
                                            absl::StrJoin(kinds, ", "), "]"));
  }
  absl::Time deadline = absl::Now() + timeout;
  absl::Status last;
  for (const std::string& address : ranked) {
    absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) break;
    Transport* t = transports.find(kind_of(address))->second;
    auto conn = t->connect(address, callbacks, left);
    if (conn.ok() || !retry_elsewhere(conn.status())) return conn;
    last = conn.status();
  }
  if (last.ok()) last = absl::DeadlineExceededError("no time left to connect");
  return last;
}

}  // namespace troupe::transport
