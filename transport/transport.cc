// make_transport(): the transport named by a kind.
#include "transport/inproc/transport.h"
#include "absl/strings/str_cat.h"
#include "transport/connection.h"
#include "transport/tcp/transport.h"
#include "transport/ucx/transport.h"

namespace troupe::transport {

absl::StatusOr<std::unique_ptr<Transport>> make_transport(std::string_view kind,
                                                          TransportOptions options) {
  if (options.token.empty()) {
    return absl::FailedPreconditionError(
        "no cluster token: pass --token-file PATH (the head writes one to its state dir) or set "
        "TROUPE_TOKEN");
  }
  if (kind == "inproc") return inproc::make_transport(std::move(options));
  if (kind == "tcp") return tcp::make_transport(std::move(options));
  if (kind == "ucx") {
    auto t = ucx::make_transport(std::move(options));
    if (!t.ok()) {
      return absl::NotFoundError(
          absl::StrCat("transport 'ucx' is not available here: ", t.status().message()));
    }
    return t;
  }
  return absl::NotFoundError(absl::StrCat("unknown transport '", std::string(kind),
                                          "' (this build has: inproc, tcp, ucx)"));
}

}  // namespace troupe::transport
