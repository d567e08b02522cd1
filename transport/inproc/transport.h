// inproc: connections between transports in the same process. Frames are
// handed over by pointer (no copy, no serialisation of buffers) and delivered
// on the receiving transport's I/O thread. Addresses: "inproc://NAME".
#pragma once

#include <memory>

#include "transport/connection.h"

namespace troupe::transport::inproc {

std::unique_ptr<Transport> make_transport(TransportOptions options);

}  // namespace troupe::transport::inproc
