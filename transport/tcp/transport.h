// tcp: connections over TCP sockets (Asio), one I/O thread per transport.
// Frames are written with scatter-gather (header, lengths, message and each
// buffer from where it lies) and read straight into their final buffers.
// Addresses: "tcp://HOST:PORT" with a numeric IPv4 or [IPv6] host; port 0
// asks the kernel for a free port.
#pragma once

#include <memory>

#include "transport/connection.h"

namespace troupe::transport::tcp {

std::unique_ptr<Transport> make_transport(TransportOptions options);

// As above, counting into `stats` (shared with a transport built on this one).
std::unique_ptr<Transport> make_transport(TransportOptions options,
                                          std::shared_ptr<TransportStats> stats);

}  // namespace troupe::transport::tcp
