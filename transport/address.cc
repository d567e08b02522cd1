#include "transport/address.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace troupe::transport {

absl::StatusOr<HostPort> parse_address(std::string_view address, std::string_view scheme) {
  auto bad = [&] {
    return absl::InvalidArgumentError(absl::StrCat("address '", std::string(address),
                                                   "' is not of the form ", std::string(scheme),
                                                   "://HOST:PORT"));
  };
  std::string prefix = absl::StrCat(std::string(scheme), "://");
  if (address.substr(0, prefix.size()) != prefix) return bad();
  std::string_view rest = address.substr(prefix.size());
  HostPort hp;
  size_t colon;
  if (!rest.empty() && rest.front() == '[') {
    size_t close = rest.find(']');
    if (close == std::string_view::npos || close + 1 >= rest.size() || rest[close + 1] != ':') {
      return bad();
    }
    hp.host = std::string(rest.substr(1, close - 1));
    colon = close + 1;
  } else {
    colon = rest.rfind(':');
    if (colon == std::string_view::npos) return bad();
    hp.host = std::string(rest.substr(0, colon));
  }
  std::string_view port_text = rest.substr(colon + 1);
  uint32_t port = 0;
  if (hp.host.empty() ||
      !absl::SimpleAtoi(absl::string_view(port_text.data(), port_text.size()), &port) ||
      port > 65535) {
    return bad();
  }
  hp.port = static_cast<uint16_t>(port);
  return hp;
}

}  // namespace troupe::transport
