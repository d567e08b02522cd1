// ActorRefs as arguments and results: in process they are handed over as
// they are; across processes (Codec<ActorRef<T>>) only a cluster node can
// write or read them, and a ref of another type is refused.
#include <gtest/gtest.h>

#include "core/actor.h"
#include "tests/core/test_actors.h"

namespace troupe::testing {

// Calls the counters it is handed.
class Forwarder {
 public:
  Future<int> add_via(ActorRef<Counter> counter, int n) { return counter.call(&Counter::add, n); }
  ActorRef<Counter> keep(ActorRef<Counter> counter) {
    kept_ = std::move(counter);
    return kept_;
  }

 private:
  ActorRef<Counter> kept_;
};
TROUPE_ACTOR(Forwarder, &Forwarder::add_via, &Forwarder::keep);

namespace {

constexpr absl::Duration kWait = absl::Seconds(30);

TEST(ActorRefArgTest, AHandleIsAnArgumentAndAResultInProcess) {
  ActorSystem system({.threads = 2});
  auto counter = system.spawn<Counter>({}, 1);
  auto forwarder = system.spawn<Forwarder>({});
  ASSERT_TRUE(counter.ok() && forwarder.ok());
  EXPECT_EQ(*forwarder->call(&Forwarder::add_via, *counter, 2).get(kWait), 3);
  auto kept = forwarder->call(&Forwarder::keep, *counter).get(kWait);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_TRUE(*kept == *counter);
  EXPECT_EQ(*kept->call(&Counter::get).get(kWait), 3);
}

TEST(ActorRefArgTest, OnlyAClusterNodeWritesOrReadsAHandle) {
  ActorSystem system({.threads = 1});
  auto counter = system.spawn<Counter>({});
  ASSERT_TRUE(counter.ok());
  Writer w;
  w.write(*counter);
  EXPECT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("only from a cluster node"), std::string::npos) << w.status();

  // An invalid ref needs no node either way.
  Writer empty;
  empty.write(ActorRef<Counter>());
  ASSERT_TRUE(empty.ok());
  Reader r(empty.bytes());
  ActorRef<Counter> out = *counter;
  ASSERT_TRUE(r.read(out)) << r.status();
  EXPECT_FALSE(out.valid());

  // A valid one does.
  Writer valid;
  valid.write(counter->id().value);
  valid.write(actor_type_of<Counter>().id);
  valid.write(uint32_t{3});
  Reader unresolved(valid.bytes());
  EXPECT_FALSE(unresolved.read(out));
  EXPECT_NE(unresolved.status().message().find("only on a cluster node"), std::string::npos)
      << unresolved.status();
}

TEST(ActorRefArgTest, AHandleOfAnotherTypeIsRefused) {
  Writer w;
  w.write(ActorRef<Forwarder>());
  Reader r(w.bytes());
  ActorRef<Counter> out;
  EXPECT_FALSE(r.read(out));
  EXPECT_NE(r.status().message().find("an ActorRef<Forwarder> where an ActorRef<Counter>"),
            std::string::npos)
      << r.status();
  EXPECT_EQ(type_name<ActorRef<Counter>>(), "ActorRef<Counter>");
}

}  // namespace
}  // namespace troupe::testing
