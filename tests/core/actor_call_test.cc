// Calls, tells, ordering, lookup and continuations.
#include <gtest/gtest.h>

#include <set>
#include <thread>
#include <vector>

#include "tests/core/test_actors.h"

namespace troupe::testing {
namespace {

constexpr absl::Duration kWait = absl::Seconds(30);

// Wrong argument types must not compile: call() is constrained on them.
template <class Ref, class M, class... A>
concept CanCall = requires(Ref r, M m, A... a) {
  r.call(m, a...);
};
static_assert(CanCall<ActorRef<Counter>, decltype(&Counter::add), int>);
static_assert(CanCall<ActorRef<Counter>, decltype(&Counter::describe), const char*>);
static_assert(!CanCall<ActorRef<Counter>, decltype(&Counter::add), std::string>);
static_assert(!CanCall<ActorRef<Counter>, decltype(&Counter::add)>);
static_assert(!CanCall<ActorRef<Counter>, decltype(&Counter::add), int, int>);
static_assert(!CanCall<ActorRef<Counter>, decltype(&SequenceChecker::received)>);

TEST(ActorCallTest, CallReturnsMethodResult) {
  ActorSystem system({.threads = 2});
  auto counter = system.spawn<Counter>({}, 10);
  ASSERT_TRUE(counter.ok()) << counter.status();
  EXPECT_EQ(*counter->call(&Counter::add, 5).get(kWait), 15);
  EXPECT_EQ(*counter->call(&Counter::get).get(kWait), 15);
  EXPECT_EQ(*counter->call(&Counter::describe, "value=").get(kWait), "value=15");
  EXPECT_TRUE(counter->call(&Counter::reset).get(kWait).ok());
  EXPECT_EQ(*counter->call(&Counter::get).get(kWait), 0);
}

TEST(ActorCallTest, StatusResultsAreErrorValuesNotFailures) {
  ActorSystem system({.threads = 2});
  auto counter = system.spawn<Counter>({}, 10);
  ASSERT_TRUE(counter.ok());
  EXPECT_EQ(counter->call(&Counter::check_positive, -1).get(kWait).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(counter->call(&Counter::check_positive, 1).get(kWait).ok());
  EXPECT_EQ(counter->call(&Counter::divide, 0).get(kWait).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(*counter->call(&Counter::divide, 5).get(kWait), 2);
  EXPECT_EQ(system.num_actors(), 1u) << "an error value does not kill the actor";
}

TEST(ActorCallTest, TellIsOrderedBeforeLaterCall) {
  ActorSystem system({.threads = 2});
  auto counter = system.spawn<Counter>({});
  ASSERT_TRUE(counter.ok());
  for (int i = 0; i < 1000; ++i)
    counter->tell(&Counter::add, 1);
  EXPECT_EQ(*counter->call(&Counter::get).get(kWait), 1000);
}

TEST(ActorCallTest, FifoPerSenderUnderManyConcurrentThreads) {
  ActorSystem system({.threads = 2});
  auto checker = system.spawn<SequenceChecker>({.mailbox_capacity = 256});
  ASSERT_TRUE(checker.ok());
  constexpr int kSenders = 8;
  constexpr int kPerSender = 5000;
  std::vector<std::thread> senders;
  for (int s = 0; s < kSenders; ++s) {
    senders.emplace_back([&, s] {
      for (int i = 1; i <= kPerSender; ++i)
        checker->tell(&SequenceChecker::record, s, i);
    });
  }
  for (auto& t : senders)
    t.join();
  EXPECT_EQ(*checker->call(&SequenceChecker::received).get(kWait), kSenders * kPerSender);
  EXPECT_EQ(*checker->call(&SequenceChecker::out_of_order).get(kWait), 0);
}

// Senders that are themselves actors, sending from the pool's threads.
class Sender {
 public:
  Sender(ActorRef<SequenceChecker> target, int id) : target_(target), id_(id) {}
  int send(int count) {
    for (int i = 1; i <= count; ++i)
      target_.tell(&SequenceChecker::record, id_, i);
    return count;
  }

 private:
  ActorRef<SequenceChecker> target_;
  int id_;
};
TROUPE_ACTOR(Sender, &Sender::send);

TEST(ActorCallTest, FifoPerSenderUnderManyConcurrentActors) {
  ActorSystem system({.threads = 2});
  auto checker = system.spawn<SequenceChecker>({.mailbox_capacity = 128});
  ASSERT_TRUE(checker.ok());
  constexpr int kSenders = 16;
  constexpr int kPerSender = 3000;
  std::vector<Future<int>> sent;
  for (int s = 0; s < kSenders; ++s) {
    auto sender = system.spawn<Sender>({}, *checker, s);
    ASSERT_TRUE(sender.ok());
    sent.push_back(sender->call(&Sender::send, kPerSender));
  }
  ASSERT_TRUE(when_all(std::move(sent)).get(kWait).ok());
  EXPECT_EQ(*checker->call(&SequenceChecker::received).get(kWait), kSenders * kPerSender);
  EXPECT_EQ(*checker->call(&SequenceChecker::out_of_order).get(kWait), 0);
}

TEST(ActorCallTest, LookupByName) {
  ActorSystem system({.threads = 2});
  auto counter = system.spawn<Counter>({.name = "counter"}, 3);
  ASSERT_TRUE(counter.ok());
  auto found = system.lookup<Counter>("counter");
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(found->id(), counter->id());
  EXPECT_EQ(*found->call(&Counter::get).get(kWait), 3);

  EXPECT_EQ(system.lookup<Counter>("missing").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(system.lookup<SequenceChecker>("counter").status().code(),
            absl::StatusCode::kInvalidArgument);
  auto duplicate = system.spawn<Counter>({.name = "counter"});
  EXPECT_EQ(duplicate.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_NE(duplicate.status().message().find(to_string(counter->id()).c_str()),
            absl::string_view::npos);
}

TEST(ActorCallTest, NameIsFreedWhenActorTerminates) {
  ActorSystem system({.threads = 2});
  auto first = system.spawn<Counter>({.name = "x"});
  ASSERT_TRUE(first.ok());
  Promise<void> dead;
  Future<void> dead_future = dead.get_future();
  system.monitor(*first, [&](ActorId, const absl::Status&) { dead.set_value(); });
  system.kill(*first);
  ASSERT_TRUE(dead_future.get(kWait).ok());
  EXPECT_EQ(system.lookup<Counter>("x").status().code(), absl::StatusCode::kNotFound);
  auto second = system.spawn<Counter>({.name = "x"}, 9);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(*system.lookup<Counter>("x")->call(&Counter::get).get(kWait), 9);
}

TEST(ActorCallTest, WhenAllOverManyActors) {
  ActorSystem system({.threads = 2});
  std::vector<Future<int>> results;
  std::vector<ActorRef<Counter>> counters;
  for (int i = 0; i < 50; ++i)
    counters.push_back(*system.spawn<Counter>({}, i));
  for (auto& c : counters)
    results.push_back(c.call(&Counter::add, 100));
  auto all = when_all(std::move(results)).get(kWait);
  ASSERT_TRUE(all.ok());
  for (int i = 0; i < 50; ++i)
    EXPECT_EQ((*all)[i], i + 100);
}

TEST(ActorCallTest, DedicatedThreadActorKeepsItsThread) {
  ActorSystem system({.threads = 2});
  Gate gate;
  auto pooled = system.spawn<GatedWorker>({}, &gate);
  auto dedicated = system.spawn<GatedWorker>({.dedicated_thread = true}, &gate);
  ASSERT_TRUE(pooled.ok() && dedicated.ok());
  std::set<std::thread::id> dedicated_threads;
  for (int i = 0; i < 20; ++i) {
    dedicated_threads.insert(*dedicated->call(&GatedWorker::thread).get(kWait));
  }
  EXPECT_EQ(dedicated_threads.size(), 1u);
  // Block the dedicated actor; the pooled one still answers.
  Future<bool> blocked = dedicated->call(&GatedWorker::wait_for_gate);
  EXPECT_EQ(*pooled->call(&GatedWorker::echo, 5).get(kWait), 5);
  EXPECT_NE(*pooled->call(&GatedWorker::thread).get(kWait), *dedicated_threads.begin());
  gate.open();
  EXPECT_TRUE(*blocked.get(kWait));
}

// An actor that calls another and continues in its own context.
class Accumulator {
 public:
  explicit Accumulator(ActorRef<Counter> source) : source_(source) {}
  // Fires `n` calls; each continuation adds to total_ inside this actor.
  Future<int> gather(int n) {
    std::vector<Future<void>> pending;
    for (int i = 0; i < n; ++i) {
      pending.push_back(source_.call(&Counter::add, 1).then([this](int v) {
        total_ += v;
        ++replies_;
      }));
    }
    return when_all(std::move(pending)).then([this] { return replies_; });
  }
  long total() const { return total_; }
  // Blocks this actor's thread on another actor's reply.
  int blocking_read() { return *source_.call(&Counter::get).get(absl::Seconds(30)); }

 private:
  ActorRef<Counter> source_;
  long total_ = 0;
  int replies_ = 0;
};
TROUPE_ACTOR(Accumulator, &Accumulator::gather, &Accumulator::total, &Accumulator::blocking_read);

TEST(ActorCallTest, ContinuationsRunInTheCallingActor) {
  ActorSystem system({.threads = 2});
  auto counter = system.spawn<Counter>({});
  auto acc = system.spawn<Accumulator>({}, *counter);
  ASSERT_TRUE(counter.ok() && acc.ok());
  constexpr int kN = 2000;
  EXPECT_EQ(*acc->call(&Accumulator::gather, kN).get(kWait), kN);
  // Replies were 1..kN in some order; their sum is fixed.
  EXPECT_EQ(*acc->call(&Accumulator::total).get(kWait), static_cast<long>(kN) * (kN + 1) / 2);
}

TEST(ActorCallTest, BlockingGetInsideActorsDoesNotStarveSinglePool) {
  ActorSystem system({.threads = 1});
  auto counter = system.spawn<Counter>({}, 77);
  ASSERT_TRUE(counter.ok());
  std::vector<Future<int>> reads;
  std::vector<ActorRef<Accumulator>> accs;
  for (int i = 0; i < 4; ++i)
    accs.push_back(*system.spawn<Accumulator>({}, *counter));
  for (auto& a : accs)
    reads.push_back(a.call(&Accumulator::blocking_read));
  auto all = when_all(std::move(reads)).get(kWait);
  ASSERT_TRUE(all.ok()) << all.status();
  for (int v : *all)
    EXPECT_EQ(v, 77);
}

TEST(ActorCallTest, GetDeadlineOnBusyActor) {
  ActorSystem system({.threads = 2});
  Gate gate;
  auto worker = system.spawn<GatedWorker>({}, &gate);
  ASSERT_TRUE(worker.ok());
  Future<bool> busy = worker->call(&GatedWorker::wait_for_gate);
  Future<int> queued = worker->call(&GatedWorker::echo, 3);
  absl::Time start = absl::Now();
  EXPECT_EQ(core_error(queued.get(absl::Milliseconds(50)).status()), CoreError::kDeadlineExceeded);
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(50));
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  gate.open();
  EXPECT_EQ(*queued.get(kWait), 3) << "the call still completes after a timed-out get";
  EXPECT_TRUE(*busy.get(kWait));
}

TEST(ActorCallTest, CallOnInvalidRefFails) {
  ActorRef<Counter> none;
  EXPECT_EQ(none.call(&Counter::get).get(kWait).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace troupe::testing
