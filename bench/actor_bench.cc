// In-process actor benchmark: troupe and CAF side by side in one invocation.
//
//   actor_bench [--threads 2] [--round-trips N] [--messages N] [--pairs 8]
//               [--repeat 5] [--json FILE] [--no-peer]
//
// Runs each case --repeat times per system, alternating systems, and reports
// medians and the troupe/CAF ratio (above 1: troupe is faster).
#include <cstdio>
#include <string>
#include <vector>

#include "bench/actor_bench.h"
#include "bench/bench_util.h"

#ifndef TROUPE_HAVE_CAF
namespace troupe::bench::caf_side {
double ping_pong(const ActorBenchConfig&) {
  return 0;
}
double driver_ping_pong(const ActorBenchConfig&) {
  return 0;
}
double one_to_one(const ActorBenchConfig&) {
  return 0;
}
double n_to_n(const ActorBenchConfig&) {
  return 0;
}
}  // namespace troupe::bench::caf_side
#endif

using namespace troupe::bench;

int main(int argc, char** argv) {
  Flags flags(argc, argv);
  if (flags.has("--help")) {
    std::printf(
        "usage: actor_bench [--threads N] [--round-trips N] [--messages N] [--pairs N]\n"
        "                   [--repeat N] [--json FILE] [--no-peer]\n");
    return 0;
  }
  ActorBenchConfig c;
  c.threads = static_cast<int>(flags.get_long("--threads", c.threads));
  c.round_trips = flags.get_long("--round-trips", c.round_trips);
  c.messages = flags.get_long("--messages", c.messages);
  c.pairs = static_cast<int>(flags.get_long("--pairs", c.pairs));
  int repeat = static_cast<int>(flags.get_long("--repeat", 5));
  std::string json = flags.get("--json", "");
  if (c.threads < 1 || c.round_trips < 4 || c.pairs < 1 || repeat < 1 ||
      c.messages < static_cast<long>(c.pairs) * c.pairs) {
    std::fprintf(stderr,
                 "actor_bench: bad sizes (need threads>=1, round-trips>=4, repeat>=1, "
                 "messages>=pairs^2)\n");
    return 2;
  }
#ifdef TROUPE_HAVE_CAF
  const bool have_caf = !flags.has("--no-peer");
#else
  const bool have_caf = false;
  std::printf("CAF (libcaf-dev) not found at build time: peer columns skipped\n");
#endif

  struct Case {
    const char* name;
    const char* unit;
    double (*troupe)(const ActorBenchConfig&);
    double (*peer)(const ActorBenchConfig&);
  };
  std::string nn_name =
      "N:N throughput (" + std::to_string(c.pairs) + "x" + std::to_string(c.pairs) + ")";
  const Case cases[] = {
      {"ping-pong actor<->actor", "round trips/s", troupe_side::ping_pong, caf_side::ping_pong},
      {"ping-pong driver thread<->actor", "round trips/s", troupe_side::driver_ping_pong,
       caf_side::driver_ping_pong},
      {"1:1 throughput", "messages/s", troupe_side::one_to_one, caf_side::one_to_one},
      {nn_name.c_str(), "messages/s", troupe_side::n_to_n, caf_side::n_to_n},
  };

  std::printf("actor_bench: %d threads, %ld round trips, %ld messages, %d pairs, %d repeats\n",
              c.threads, c.round_trips, c.messages, c.pairs, repeat);
  std::vector<Row> rows;
  for (const Case& k : cases) {
    std::vector<double> ours, theirs;
    for (int i = 0; i < repeat; ++i) {
      ours.push_back(k.troupe(c));
      if (have_caf) theirs.push_back(k.peer(c));
    }
    rows.push_back(Row{k.name, k.unit, median(ours), median(theirs)});
    std::fflush(stdout);
  }
  print_table("CAF", rows);
  if (!json.empty() && !write_json(json, "actor_bench",
                                   "CAF "
                                   "0.17",
                                   rows)) {
    std::fprintf(stderr, "actor_bench: cannot write %s\n", json.c_str());
    return 1;
  }
  return 0;
}
