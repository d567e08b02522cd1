// ucx: connections over UCX's UCP layer, which picks the best path both sides
// have: shared memory and cross-memory attach on one host, TCP between hosts,
// RDMA verbs or CUDA IPC where the hardware and the UCX build provide them.
// Frames travel as UCP active messages: the frame header and buffer lengths
// as the AM header, the Cap'n Proto message and buffers as an I/O vector, so
// large buffers go by rendezvous (zero-copy) straight into their final
// allocation. Connections are set up through UCX's socket-address listener.
// Addresses: "ucx://HOST:PORT" (numeric IPv4; port 0 picks one).
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "transport/connection.h"

namespace troupe::transport::ucx {

// Unavailable if UCX cannot initialise here (it then says why).
absl::StatusOr<std::unique_ptr<Transport>> make_transport(TransportOptions options);

}  // namespace troupe::transport::ucx
