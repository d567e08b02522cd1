// In-process actor benchmark cases, implemented once for troupe and once for
// CAF. Each runs once and returns its rate: round trips or messages per second.
#pragma once

namespace troupe::bench {

struct ActorBenchConfig {
  int threads = 2;            // scheduler threads for both systems
  long round_trips = 200000;  // ping-pong round trips per run
  long messages = 2000000;    // one-way messages per throughput run
  int pairs = 8;              // senders and receivers in the N:N case
};

namespace troupe_side {
double ping_pong(const ActorBenchConfig& c);         // actor <-> actor request/reply
double driver_ping_pong(const ActorBenchConfig& c);  // blocking caller thread <-> actor
double one_to_one(const ActorBenchConfig& c);        // one sender, one receiver, one-way
double n_to_n(const ActorBenchConfig& c);            // pairs senders x pairs receivers
}  // namespace troupe_side

namespace caf_side {
double ping_pong(const ActorBenchConfig& c);
double driver_ping_pong(const ActorBenchConfig& c);
double one_to_one(const ActorBenchConfig& c);
double n_to_n(const ActorBenchConfig& c);
}  // namespace caf_side

}  // namespace troupe::bench
