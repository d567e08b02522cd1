// Runs ucx_perftest (Debian ucx-utils) as a peer: a server and a client
// process on loopback, over UCX_TLS=`tls` (empty: UCX's own choice), with
// endpoints that report peer failure when `error_handling` (its -e flag, the
// mode troupe's ucx transport uses).
#pragma once

#include <cstddef>
#include <string>

namespace troupe::bench {

bool ucx_perftest_available();
// Full round trip of ucp_am_lat with 8-byte messages: twice its median
// one-way latency, in microseconds (or, with `mean`, twice its overall
// one-way latency: the run's time over its iterations). 0 if the run failed.
double perftest_rtt_us(const std::string& tls, long iterations, bool error_handling = false,
                       bool mean = false);
// ucp_am_bw with `size`-byte messages, in bytes per second. 0 if it failed.
double perftest_bandwidth(const std::string& tls, size_t size, long iterations,
                          bool error_handling = false);

}  // namespace troupe::bench
