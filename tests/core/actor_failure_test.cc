// Failures, restarts, kill, monitors, shutdown.
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <vector>

#include "tests/core/test_actors.h"

namespace troupe::testing {
namespace {

constexpr absl::Duration kWait = absl::Seconds(30);

bool contains(absl::string_view haystack, absl::string_view needle) {
  return haystack.find(needle) != absl::string_view::npos;
}

// Keeps its state in a "store" outside itself and restores it on restart,
// the way a parameter shard restores from a replica.
struct Store {
  std::atomic<int> saved{0};
  std::atomic<int> restarts_seen{0};
  std::atomic<int> last_restart_count{0};
  std::string last_reason;
};

class Stateful {
 public:
  explicit Stateful(Store* store) : store_(store) {}
  int add(int n) {
    value_ += n;
    store_->saved = value_;
    return value_;
  }
  int value() const { return value_; }
  int fail() { throw std::logic_error("invariant broken"); }
  void on_restart(const RestartInfo& info) {
    value_ = store_->saved;
    store_->restarts_seen++;
    store_->last_restart_count = info.restart_count;
    store_->last_reason = std::string(info.reason.message());
  }

 private:
  Store* store_;
  int value_ = 0;
};
TROUPE_ACTOR(Stateful, &Stateful::add, &Stateful::value, &Stateful::fail);

TEST(ActorFailureTest, ThrowingMethodFailsItsCallerWithActorDied) {
  ActorSystem system({.threads = 2});
  auto counter = system.spawn<Counter>({.name = "c1"});
  ASSERT_TRUE(counter.ok());
  absl::StatusOr<int> r = counter->call(&Counter::boom).get(kWait);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(IsActorDied(r.status())) << r.status();
  EXPECT_TRUE(contains(r.status().message(), "Counter::boom")) << r.status();
  EXPECT_TRUE(contains(r.status().message(), "std::runtime_error: counter exploded")) << r.status();
  EXPECT_TRUE(contains(r.status().message(), "'c1'")) << r.status();
  // No restarts: the actor is gone and later calls fail the same way.
  absl::StatusOr<int> later = counter->call(&Counter::get).get(kWait);
  EXPECT_TRUE(IsActorDied(later.status())) << later.status();
  EXPECT_TRUE(contains(later.status().message(), "counter exploded"));
}

TEST(ActorFailureTest, RestartCallsOnRestartAndKeepsPendingMessages) {
  ActorSystem system({.threads = 2});
  Store store;
  auto actor = system.spawn<Stateful>({.max_restarts = 2}, &store);
  ASSERT_TRUE(actor.ok());
  EXPECT_EQ(*actor->call(&Stateful::add, 5).get(kWait), 5);

  // Queue a failure followed by more work: the work runs on the new instance.
  Future<int> failing = actor->call(&Stateful::fail);
  Future<int> after = actor->call(&Stateful::add, 1);
  EXPECT_TRUE(IsActorDied(failing.get(kWait).status()));
  EXPECT_EQ(*after.get(kWait), 6) << "state restored by on_restart, then the pending add ran";
  EXPECT_EQ(store.restarts_seen.load(), 1);
  EXPECT_EQ(store.last_restart_count.load(), 1);
  EXPECT_TRUE(contains(store.last_reason, "invariant broken"));

  EXPECT_TRUE(IsActorDied(actor->call(&Stateful::fail).get(kWait).status()));
  EXPECT_EQ(*actor->call(&Stateful::value).get(kWait), 6);
  EXPECT_EQ(store.last_restart_count.load(), 2);

  // Restarts exhausted: the third failure is final.
  std::atomic<int> deaths{0};
  Promise<absl::Status> death;
  Future<absl::Status> death_future = death.get_future();
  system.monitor(*actor, [&](ActorId, const absl::Status& why) {
    deaths++;
    death.set_value(why);
  });
  EXPECT_TRUE(IsActorDied(actor->call(&Stateful::fail).get(kWait).status()));
  absl::StatusOr<absl::Status> why = death_future.get(kWait);
  ASSERT_TRUE(why.ok());
  EXPECT_TRUE(IsActorDied(*why));
  EXPECT_TRUE(contains(why->message(), "Stateful::fail"));
  EXPECT_TRUE(IsActorDied(actor->call(&Stateful::value).get(kWait).status()));
  EXPECT_EQ(deaths.load(), 1);
  EXPECT_EQ(system.num_actors(), 0u);
}

TEST(ActorFailureTest, KillWithRestartBehavesLikeACrash) {
  ActorSystem system({.threads = 2});
  Store store;
  auto actor = system.spawn<Stateful>({.max_restarts = -1}, &store);
  ASSERT_TRUE(actor.ok());
  EXPECT_EQ(*actor->call(&Stateful::add, 3).get(kWait), 3);
  for (int i = 1; i <= 3; ++i) {
    system.kill(*actor, /*no_restart=*/false);
    EXPECT_EQ(*actor->call(&Stateful::add, 1).get(kWait), 3 + i);
  }
  EXPECT_EQ(store.restarts_seen.load(), 3);
  EXPECT_TRUE(contains(store.last_reason, "killed"));
}

TEST(ActorFailureTest, KillFailsPendingCalls) {
  ActorSystem system({.threads = 2});
  Gate gate;
  auto worker = system.spawn<GatedWorker>({.max_restarts = 5}, &gate);
  ASSERT_TRUE(worker.ok());
  Future<bool> running = worker->call(&GatedWorker::wait_for_gate);
  std::vector<Future<int>> pending;
  for (int i = 0; i < 10; ++i)
    pending.push_back(worker->call(&GatedWorker::echo, i));
  ASSERT_TRUE(gate.wait_entered(1));
  system.kill(*worker);  // no_restart: max_restarts does not apply
  gate.open();
  EXPECT_TRUE(*running.get(kWait)) << "the message being run completes";
  for (auto& f : pending) {
    absl::StatusOr<int> r = f.get(kWait);
    EXPECT_TRUE(IsActorDied(r.status())) << r.status();
    EXPECT_TRUE(contains(r.status().message(), "killed"));
  }
}

class FailsInConstructor {
 public:
  explicit FailsInConstructor(bool fail) {
    if (fail) throw std::invalid_argument("bad config");
  }
  int ping() { return 1; }
};
TROUPE_ACTOR(FailsInConstructor, &FailsInConstructor::ping);

TEST(ActorFailureTest, ConstructorFailureIsASpawnError) {
  ActorSystem system({.threads = 2});
  auto bad = system.spawn<FailsInConstructor>({}, true);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(bad.status().message(), "bad config"));
  EXPECT_EQ(system.num_actors(), 0u);
}

// Built through a factory: a bad argument is an error value, not an exception.
class MadeByFactory {
 public:
  static absl::StatusOr<std::unique_ptr<MadeByFactory>> create(int size) {
    if (size < 1) return absl::InvalidArgumentError("size must be >= 1");
    if (size > 100) return absl::ResourceExhaustedError("no room for that size");
    return std::unique_ptr<MadeByFactory>(new MadeByFactory(size));
  }
  int size() const { return size_; }

 private:
  explicit MadeByFactory(int size) : size_(size) {}
  int size_;
};
TROUPE_ACTOR(MadeByFactory, &MadeByFactory::size);

TEST(ActorFailureTest, FactoryErrorIsTheSpawnErrorWithItsCode) {
  ActorSystem system({.threads = 2});
  auto good = system.spawn<MadeByFactory>({}, 7);
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_EQ(*good->call(&MadeByFactory::size).get(kWait), 7);
  auto bad = system.spawn<MadeByFactory>({}, 0);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(bad.status().message(), "cannot spawn MadeByFactory: size must be >= 1"))
      << bad.status();
  auto big = system.spawn<MadeByFactory>({}, 1000);
  EXPECT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(system.num_actors(), 1u);
}

// Its factory succeeds `builds` times, then fails: a restart that cannot
// build the actor ends it, with the factory's reason.
class BuildsTwice {
 public:
  static absl::StatusOr<std::unique_ptr<BuildsTwice>> create(std::atomic<int>* builds) {
    if (builds->fetch_add(1) >= 1) return absl::UnavailableError("its device is gone");
    return std::unique_ptr<BuildsTwice>(new BuildsTwice());
  }
  int crash() { throw std::runtime_error("lost its state"); }
  int ping() { return 1; }

 private:
  BuildsTwice() = default;
};
TROUPE_ACTOR(BuildsTwice, &BuildsTwice::crash, &BuildsTwice::ping);

TEST(ActorFailureTest, ARestartWhoseFactoryFailsEndsTheActor) {
  ActorSystem system({.threads = 2});
  std::atomic<int> builds{0};
  auto actor = system.spawn<BuildsTwice>({.max_restarts = 3}, &builds);
  ASSERT_TRUE(actor.ok()) << actor.status();
  EXPECT_TRUE(IsActorDied(actor->call(&BuildsTwice::crash).get(kWait).status()));
  absl::StatusOr<int> after = actor->call(&BuildsTwice::ping).get(kWait);
  ASSERT_FALSE(after.ok());
  EXPECT_TRUE(IsActorDied(after.status())) << after.status();
  EXPECT_TRUE(contains(after.status().message(), "its device is gone")) << after.status();
  EXPECT_EQ(builds.load(), 4) << "the spawn, then each of the 3 restarts tried";
}

TEST(ActorFailureTest, MonitorAfterDeathFiresImmediately) {
  ActorSystem system({.threads = 2});
  auto counter = system.spawn<Counter>({});
  ASSERT_TRUE(counter.ok());
  ASSERT_FALSE(counter->call(&Counter::boom).get(kWait).ok());
  // The caller learns of the failure before termination completes; wait for it.
  Promise<void> seen;
  Future<void> seen_future = seen.get_future();
  system.monitor(*counter, [&](ActorId id, const absl::Status& why) {
    EXPECT_EQ(id, counter->id());
    EXPECT_TRUE(IsActorDied(why));
    seen.set_value();
  });
  EXPECT_TRUE(seen_future.get(kWait).ok());
}

TEST(ActorFailureTest, ManyFailuresNeverCrashOrHang) {
  ActorSystem system({.threads = 2});
  Store store;
  auto actor = system.spawn<Stateful>({.max_restarts = -1}, &store);
  ASSERT_TRUE(actor.ok());
  std::vector<Future<int>> results;
  for (int i = 0; i < 500; ++i) {
    results.push_back(i % 2 == 0 ? actor->call(&Stateful::fail) : actor->call(&Stateful::add, 1));
  }
  int died = 0, ok = 0;
  for (auto& f : results) {
    absl::StatusOr<int> r = f.get(kWait);
    ASSERT_NE(core_error(r.status()), CoreError::kDeadlineExceeded);
    if (r.ok()) ++ok;
    if (IsActorDied(r.status())) ++died;
  }
  EXPECT_EQ(died, 250);
  EXPECT_EQ(ok, 250);
  EXPECT_EQ(store.restarts_seen.load(), 250);
}

TEST(ActorFailureTest, ShutdownFailsPendingCallsAndLaterSpawns) {
  Gate gate;
  std::vector<Future<int>> pending;
  Future<bool> running;
  {
    ActorSystem system({.threads = 2});
    auto worker = system.spawn<GatedWorker>({}, &gate);
    ASSERT_TRUE(worker.ok());
    running = worker->call(&GatedWorker::wait_for_gate);
    for (int i = 0; i < 5; ++i)
      pending.push_back(worker->call(&GatedWorker::echo, i));
    ASSERT_TRUE(gate.wait_entered(1));
    std::thread opener([&] {
      // Shutdown waits for the running message; let it finish once shutdown began.
      while (system.spawn<Counter>({}).ok())
        std::this_thread::yield();
      gate.open();
    });
    system.shutdown();
    opener.join();
    EXPECT_EQ(system.spawn<Counter>({}).status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_TRUE(IsActorDied(worker->call(&GatedWorker::echo, 1).get(kWait).status()));
  }
  EXPECT_TRUE(*running.get(kWait));
  for (auto& f : pending)
    EXPECT_TRUE(IsActorDied(f.get(kWait).status()));
}

}  // namespace
}  // namespace troupe::testing
