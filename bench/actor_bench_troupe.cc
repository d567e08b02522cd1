// troupe side of the in-process actor benchmark.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "bench/actor_bench.h"
#include "bench/bench_util.h"
#include "core/actor.h"

namespace troupe::bench::troupe_side {
namespace {

class Ponger {
 public:
  int ping(int v) { return v; }
};
TROUPE_ACTOR(Ponger, &Ponger::ping);

// Sends one request at a time and issues the next from the reply's continuation.
class Pinger {
 public:
  explicit Pinger(ActorRef<Ponger> pong) : pong_(pong) {}
  Future<int> run(long n) {
    remaining_ = n;
    done_ = Promise<int>();
    Future<int> done = done_.get_future();
    next();
    return done;
  }

 private:
  void next() {
    static_cast<void>(pong_.call(&Ponger::ping, 1).then([this](int v) {
      if (--remaining_ == 0) {
        done_.set_value(v);
      } else {
        next();
      }
    }));
  }
  ActorRef<Ponger> pong_;
  long remaining_ = 0;
  Promise<int> done_;
};
TROUPE_ACTOR(Pinger, &Pinger::run);

class Sink {
 public:
  Future<void> expect(long n) {
    expected_ = n;
    received_ = 0;
    done_ = Promise<void>();
    return done_.get_future();
  }
  void push(long) {
    if (++received_ == expected_) done_.set_value();
  }

 private:
  long expected_ = 0;
  long received_ = 0;
  Promise<void> done_;
};
TROUPE_ACTOR(Sink, &Sink::expect, &Sink::push);

class Source {
 public:
  explicit Source(std::vector<ActorRef<Sink>> sinks) : sinks_(std::move(sinks)) {}
  long blast(long per_sink) {
    for (long i = 0; i < per_sink; ++i) {
      for (const auto& s : sinks_)
        s.tell(&Sink::push, i);
    }
    return per_sink * static_cast<long>(sinks_.size());
  }

 private:
  std::vector<ActorRef<Sink>> sinks_;
};
TROUPE_ACTOR(Source, &Source::blast);

template <class T>
T must(absl::StatusOr<T> v, const char* what) {
  if (!v.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, v.status().ToString().c_str());
    std::exit(1);
  }
  return *std::move(v);
}

void must_ok(absl::Status s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, s.ToString().c_str());
    std::exit(1);
  }
}

}  // namespace

double ping_pong(const ActorBenchConfig& c) {
  ActorSystem system({.threads = c.threads});
  auto pong = must(system.spawn<Ponger>({}), "spawn Ponger");
  auto ping = must(system.spawn<Pinger>({}, pong), "spawn Pinger");
  auto start = std::chrono::steady_clock::now();
  must(ping.call(&Pinger::run, c.round_trips).get(), "ping-pong");
  return static_cast<double>(c.round_trips) / seconds_since(start);
}

double driver_ping_pong(const ActorBenchConfig& c) {
  ActorSystem system({.threads = c.threads});
  auto pong = must(system.spawn<Ponger>({}), "spawn Ponger");
  long n = c.round_trips / 4;
  auto start = std::chrono::steady_clock::now();
  for (long i = 0; i < n; ++i)
    must(pong.call(&Ponger::ping, 1).get(), "driver ping");
  return static_cast<double>(n) / seconds_since(start);
}

namespace {
double fan(const ActorBenchConfig& c, int senders, int receivers) {
  ActorSystem system({.threads = c.threads});
  std::vector<ActorRef<Sink>> sinks;
  for (int i = 0; i < receivers; ++i)
    sinks.push_back(must(system.spawn<Sink>({}), "spawn Sink"));
  std::vector<ActorRef<Source>> sources;
  for (int i = 0; i < senders; ++i) {
    sources.push_back(must(system.spawn<Source>({}, sinks), "spawn Source"));
  }
  long per_pair = c.messages / (static_cast<long>(senders) * receivers);
  std::vector<Future<void>> done;
  for (auto& s : sinks)
    done.push_back(s.call(&Sink::expect, per_pair * senders));
  auto start = std::chrono::steady_clock::now();
  std::vector<Future<long>> sent;
  for (auto& s : sources)
    sent.push_back(s.call(&Source::blast, per_pair));
  must_ok(when_all(std::move(done)).get(), "throughput");
  must(when_all(std::move(sent)).get(), "senders");
  return static_cast<double>(per_pair * senders * receivers) / seconds_since(start);
}
}  // namespace

double one_to_one(const ActorBenchConfig& c) {
  return fan(c, 1, 1);
}
double n_to_n(const ActorBenchConfig& c) {
  return fan(c, c.pairs, c.pairs);
}

}  // namespace troupe::bench::troupe_side
