// CAF side of the in-process actor benchmark: the same cases written the way
// CAF's own examples write them (event-based actors, request/then).
#include <caf/all.hpp>

#include <chrono>
#include <cstdio>
#include <vector>

#include "bench/actor_bench.h"
#include "bench/bench_util.h"

namespace troupe::bench::caf_side {
namespace {

using ping_atom = caf::atom_constant<caf::atom("ping")>;
using start_atom = caf::atom_constant<caf::atom("start")>;
using done_atom = caf::atom_constant<caf::atom("done")>;
using go_atom = caf::atom_constant<caf::atom("go")>;

struct Config : caf::actor_system_config {
  explicit Config(int threads) {
    set("scheduler.max-threads", static_cast<size_t>(threads));
    set("logger.verbosity", caf::atom("quiet"));
  }
};

caf::behavior ponger(caf::event_based_actor*) {
  return {[](ping_atom, int v) { return v; }};
}

struct PingState {
  long remaining = 0;
  caf::response_promise done;
};

void ping_next(caf::stateful_actor<PingState>* self, const caf::actor& pong) {
  self->request(pong, caf::infinite, ping_atom::value, 1).then([=](int v) {
    if (--self->state.remaining == 0) {
      self->state.done.deliver(v);
    } else {
      ping_next(self, pong);
    }
  });
}

caf::behavior pinger(caf::stateful_actor<PingState>* self, caf::actor pong) {
  return {[=](start_atom, long n) {
    self->state.remaining = n;
    self->state.done = self->make_response_promise();
    ping_next(self, pong);
    return self->state.done;
  }};
}

struct SinkState {
  long expected = 0;
  long received = 0;
  caf::actor notify;
};

caf::behavior sink(caf::stateful_actor<SinkState>* self, long expected, caf::actor notify) {
  self->state.expected = expected;
  self->state.notify = notify;
  return {[=](long) {
    if (++self->state.received == self->state.expected) {
      self->send(self->state.notify, done_atom::value);
    }
  }};
}

caf::behavior source(caf::event_based_actor* self, std::vector<caf::actor> sinks) {
  return {[=](go_atom, long per_sink) {
    for (long i = 0; i < per_sink; ++i) {
      for (const auto& s : sinks)
        self->send(s, i);
    }
  }};
}

double fan(const ActorBenchConfig& c, int senders, int receivers) {
  Config cfg(c.threads);
  caf::actor_system system{cfg};
  caf::scoped_actor self{system};
  long per_pair = c.messages / (static_cast<long>(senders) * receivers);
  std::vector<caf::actor> sinks;
  for (int i = 0; i < receivers; ++i) {
    sinks.push_back(system.spawn(sink, per_pair * senders, caf::actor{self}));
  }
  std::vector<caf::actor> sources;
  for (int i = 0; i < senders; ++i)
    sources.push_back(system.spawn(source, sinks));
  auto start = std::chrono::steady_clock::now();
  for (auto& s : sources)
    self->send(s, go_atom::value, per_pair);
  for (int i = 0; i < receivers; ++i)
    self->receive([](done_atom) {});
  double rate = static_cast<double>(per_pair * senders * receivers) / seconds_since(start);
  for (auto& a : sources)
    self->send_exit(a, caf::exit_reason::user_shutdown);
  for (auto& a : sinks)
    self->send_exit(a, caf::exit_reason::user_shutdown);
  return rate;
}

}  // namespace

double ping_pong(const ActorBenchConfig& c) {
  Config cfg(c.threads);
  caf::actor_system system{cfg};
  caf::scoped_actor self{system};
  auto pong = system.spawn(ponger);
  auto ping = system.spawn(pinger, pong);
  auto start = std::chrono::steady_clock::now();
  double rate = 0;
  self->request(ping, caf::infinite, start_atom::value, c.round_trips)
      .receive([&](int) { rate = static_cast<double>(c.round_trips) / seconds_since(start); },
               [&](caf::error& e) {
                 std::fprintf(stderr, "caf ping-pong: %s\n", system.render(e).c_str());
               });
  self->send_exit(ping, caf::exit_reason::user_shutdown);
  self->send_exit(pong, caf::exit_reason::user_shutdown);
  return rate;
}

double driver_ping_pong(const ActorBenchConfig& c) {
  Config cfg(c.threads);
  caf::actor_system system{cfg};
  caf::scoped_actor self{system};
  auto pong = system.spawn(ponger);
  long n = c.round_trips / 4;
  auto start = std::chrono::steady_clock::now();
  for (long i = 0; i < n; ++i) {
    self->request(pong, caf::infinite, ping_atom::value, 1)
        .receive([](int) {},
                 [&](caf::error& e) {
                   std::fprintf(stderr, "caf driver ping: %s\n", system.render(e).c_str());
                 });
  }
  double rate = static_cast<double>(n) / seconds_since(start);
  self->send_exit(pong, caf::exit_reason::user_shutdown);
  return rate;
}

double one_to_one(const ActorBenchConfig& c) {
  return fan(c, 1, 1);
}
double n_to_n(const ActorBenchConfig& c) {
  return fan(c, c.pairs, c.pairs);
}

}  // namespace troupe::bench::caf_side
