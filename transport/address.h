// Transport addresses: "SCHEME://HOST:PORT", with [IPv6] hosts in brackets.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace troupe::transport {

struct HostPort {
  std::string host;
  uint16_t port = 0;
};

// Parses "scheme://host:port" for the given scheme. InvalidArgument, naming
// the expected form, for anything else.
absl::StatusOr<HostPort> parse_address(std::string_view address, std::string_view scheme);

}  // namespace troupe::transport
