// Choosing how to reach a peer. A node advertises every endpoint it listens
// on ("ucx://10.0.0.5:7001", "tcp://10.0.0.5:7002", ...); a peer ranks them by
// the transports it has itself and connects to the best one that answers.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "transport/connection.h"

namespace troupe::transport {

// Transport kinds, best first: in-process hand-off, then UCX (shared memory,
// RDMA), then plain TCP.
inline constexpr std::string_view kPreferredKinds[] = {"inproc", "ucx", "tcp"};

// "ucx" for "ucx://host:port"; empty if there is no scheme.
std::string_view kind_of(std::string_view address);

// The endpoints of `advertised` that one of `usable` (transport kinds) can
// reach, best first (ties keep the advertised order). Unknown kinds are left out.
std::vector<std::string> rank_endpoints(const std::vector<std::string>& advertised,
                                        const std::vector<std::string>& usable);

// Connects to the best endpoint of `advertised` that `transports` (by kind)
// can reach, falling back to the next when one is unreachable (Unavailable,
// NotFound, DeadlineExceeded). A refusal (PermissionDenied) or bad address is
// returned at once: a wrong token must not be retried elsewhere. Each attempt
// gets the time left before `timeout` runs out. Errors: the last attempt's,
// or NotFound if no endpoint is usable.
absl::StatusOr<std::shared_ptr<Connection>> connect_best(
    const std::map<std::string, Transport*, std::less<>>& transports,
    const std::vector<std::string>& advertised, const ConnectionCallbacks& callbacks,
    absl::Duration timeout);

}  // namespace troupe::transport
