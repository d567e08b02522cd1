// Calls between nodes: two Node objects in one process, talking over real
// transports (ucx where available, tcp), as two processes would.
#include "core/cluster/detail/node.h"

#include <gtest/gtest.h>

#include <cstring>

#include "tests/core/test_actors.h"

namespace troupe::cluster {
namespace {

using troupe::testing::Counter;
using troupe::testing::GatedWorker;
using troupe::testing::SequenceChecker;

constexpr char kToken[] = "node-test-token";

uint64_t byte_sum(const transport::Buffer& b) {
  uint64_t s = 0;
  for (size_t i = 0; i < b.size(); ++i)
    s += static_cast<uint8_t>(b.data()[i]);
  return s;
}

transport::Buffer patterned(size_t size, int seed) {
  transport::Buffer b(size);
  for (size_t i = 0; i < size; ++i)
    b.data()[i] = static_cast<std::byte>(i * 31 + seed);
  return b;
}

// A value with a buffer inside: its codec writes the buffer as a view.
struct Tagged {
  int64_t tag = 0;
  transport::Buffer data;
  TROUPE_FIELDS(tag, data);
};

// Holds buffers and answers with sums and copies of them.
class BufferEcho {
 public:
  transport::Buffer echo(transport::Buffer b) { return b; }
  // A fresh buffer inside the result, freed here once the result is sent.
  Tagged make(int64_t tag, int64_t size) { return {tag, patterned(size, static_cast<int>(tag))}; }
  void keep(Tagged t) { kept_ += byte_sum(t.data); }
  uint64_t kept() const { return kept_; }
  uint64_t sum(const transport::Buffer& b) const { return byte_sum(b); }
  // Cannot cross processes: a std::function has no Codec.
  int apply(std::function<int()> f) const { return f(); }

 private:
  uint64_t kept_ = 0;
};
TROUPE_ACTOR(BufferEcho, &BufferEcho::echo, &BufferEcho::sum, &BufferEcho::apply, &BufferEcho::make,
             &BufferEcho::keep, &BufferEcho::kept);

class NodeTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    a_ = start(1);
    if (!a_) return;  // skipped or failed, with the reason
    b_ = start(2);
    ASSERT_TRUE(b_);
    b_->set_node_endpoints(1, a_->endpoints());
    a_->set_node_endpoints(2, b_->endpoints());
  }

  std::unique_ptr<Node> start(uint32_t index) {
    auto node =
        Node::start({.index = index, .token = kToken, .transports = {GetParam()}, .threads = 2});
    if (!node.ok()) {
      if (GetParam() == "ucx") {
        ([&] { GTEST_SKIP() << "ucx is not available: " << node.status(); })();
      } else {
        ADD_FAILURE() << node.status();
      }
      return nullptr;
    }
    return *std::move(node);
  }

  std::unique_ptr<Node> a_, b_;
};

TEST_P(NodeTest, CallsAnActorOnAnotherNode) {
  auto counter = a_->system().spawn<Counter>({}, 10);
  ASSERT_TRUE(counter.ok());
  ActorRef<Counter> remote = b_->ref<Counter>(counter->id(), 1);
  EXPECT_EQ(*remote.call(&Counter::add, 5).get(absl::Seconds(10)), 15);
  EXPECT_EQ(*remote.call(&Counter::describe, std::string("v=")).get(absl::Seconds(10)), "v=15");
  EXPECT_EQ(a_->calls_served(), 2u);
}

TEST_P(NodeTest, ErrorsAndStatusesCrossIntact) {
  auto counter = a_->system().spawn<Counter>({}, 0);
  ActorRef<Counter> remote = b_->ref<Counter>(counter->id(), 1);
  absl::Status s = remote.call(&Counter::check_positive, -1).get(absl::Seconds(10));
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_EQ(s.message(), "not positive");
  auto q = remote.call(&Counter::divide, 0).get(absl::Seconds(10));
  EXPECT_TRUE(absl::IsInvalidArgument(q.status())) << q.status();
  // A method that throws fails the actor: the remote caller gets ActorDied.
  auto boom = remote.call(&Counter::boom).get(absl::Seconds(10));
  EXPECT_TRUE(IsActorDied(boom.status())) << boom.status();
  EXPECT_NE(boom.status().message().find("counter exploded"), std::string::npos);
  // And later calls find it gone.
  auto after = remote.call(&Counter::get).get(absl::Seconds(10));
  EXPECT_TRUE(IsActorDied(after.status())) << after.status();
}

TEST_P(NodeTest, TellsArriveInOrder) {
  auto checker = a_->system().spawn<SequenceChecker>({});
  ActorRef<SequenceChecker> remote = b_->ref<SequenceChecker>(checker->id(), 1);
  for (int i = 1; i <= 2000; ++i)
    remote.tell(&SequenceChecker::record, 7, i);
  // A call after the tells, on the same connection, is answered after them.
  EXPECT_EQ(*remote.call(&SequenceChecker::received).get(absl::Seconds(30)), 2000);
  EXPECT_EQ(*remote.call(&SequenceChecker::out_of_order).get(absl::Seconds(10)), 0);
}

TEST_P(NodeTest, BuffersTravelOutOfBand) {
  auto echo = a_->system().spawn<BufferEcho>({});
  ActorRef<BufferEcho> remote = b_->ref<BufferEcho>(echo->id(), 1);
  transport::Buffer big(size_t{8} << 20);
  for (size_t i = 0; i < big.size(); ++i)
    big.data()[i] = static_cast<std::byte>(i * 31);
  uint64_t want = 0;
  for (size_t i = 0; i < big.size(); ++i)
    want += static_cast<uint8_t>(big.data()[i]);
  auto copy = transport::Buffer::copy_of(big.bytes());
  EXPECT_EQ(*remote.call(&BufferEcho::sum, std::move(big)).get(absl::Seconds(30)), want);
  auto back = remote.call(&BufferEcho::echo, std::move(copy)).get(absl::Seconds(30));
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->size(), size_t{8} << 20);
  EXPECT_EQ(back->data()[12345], static_cast<std::byte>(12345 * 31));
}

// The buffers inside a result or a tell's arguments outlive the call that
// made them until they are sent: the sender's copies are freed (and their
// blocks reused) while the frames may still be queued.
TEST_P(NodeTest, BuffersInsideValuesStayAliveUntilSent) {
  auto echo = a_->system().spawn<BufferEcho>({});
  ActorRef<BufferEcho> remote = b_->ref<BufferEcho>(echo->id(), 1);
  constexpr int64_t kSize = int64_t{4} << 20;
  constexpr int kCalls = 6;
  std::vector<Future<Tagged>> made;
  for (int k = 0; k < kCalls; ++k)
    made.push_back(remote.call(&BufferEcho::make, k, kSize));
  uint64_t want = 0;
  for (int k = 0; k < kCalls; ++k) {
    auto got = std::move(made[k]).get(absl::Seconds(60));
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->tag, k);
    const transport::Buffer expected = patterned(kSize, k);
    ASSERT_EQ(got->data.size(), expected.size());
    EXPECT_EQ(std::memcmp(got->data.data(), expected.data(), expected.size()), 0) << "call " << k;
    want += byte_sum(expected);
  }
  for (int k = 0; k < kCalls; ++k)
    remote.tell(&BufferEcho::keep, Tagged{k, patterned(kSize, k)});
  EXPECT_EQ(*remote.call(&BufferEcho::kept).get(absl::Seconds(60)), want);
}

TEST_P(NodeTest, AMethodThatCannotCrossSaysSo) {
  auto echo = a_->system().spawn<BufferEcho>({});
  ActorRef<BufferEcho> remote = b_->ref<BufferEcho>(echo->id(), 1);
  auto r = remote.call(&BufferEcho::apply, std::function<int()>([] { return 1; }))
               .get(absl::Seconds(10));
  EXPECT_TRUE(absl::IsUnimplemented(r.status())) << r.status();
  EXPECT_NE(r.status().message().find("BufferEcho::apply"), std::string::npos);
}

TEST_P(NodeTest, UnknownActorIsActorDied) {
  ActorRef<Counter> ghost = b_->ref<Counter>(ActorId::make(1, 999), 1);
  auto r = ghost.call(&Counter::get).get(absl::Seconds(10));
  EXPECT_TRUE(IsActorDied(r.status())) << r.status();
  EXPECT_NE(r.status().message().find("actor-1-999"), std::string::npos);
}

TEST_P(NodeTest, LosingTheNodeFailsCallsInFlightWithActorDied) {
  troupe::testing::Gate gate;
  auto worker = a_->system().spawn<GatedWorker>({}, &gate);
  ASSERT_TRUE(worker.ok());
  ActorRef<GatedWorker> remote = b_->ref<GatedWorker>(worker->id(), 1);
  auto blocked = remote.call(&GatedWorker::wait_for_gate);
  ASSERT_TRUE(gate.wait_entered(1));  // the call is running on node 1
  // Node 2 learns that node 1 is gone (as the head would tell it).
  b_->fail_node(1, absl::UnavailableError("missed heartbeats for 1s"));
  auto r = std::move(blocked).get(absl::Seconds(10));
  EXPECT_TRUE(IsActorDied(r.status())) << r.status();
  EXPECT_NE(r.status().message().find("node 1"), std::string::npos) << r.status();
  EXPECT_NE(r.status().message().find("missed heartbeats"), std::string::npos) << r.status();
  // Later calls fail at once, the same way.
  auto later = remote.call(&GatedWorker::echo, 1).get(absl::Seconds(10));
  EXPECT_TRUE(IsActorDied(later.status())) << later.status();
  gate.open();
}

TEST_P(NodeTest, ABrokenConnectionFailsCallsAndIsReported) {
  troupe::testing::Gate gate;
  auto worker = a_->system().spawn<GatedWorker>({}, &gate);
  std::atomic<int> reported{-1};
  b_->set_hooks({.peer_lost = [&](uint32_t node, absl::Status) { reported = node; }});
  ActorRef<GatedWorker> remote = b_->ref<GatedWorker>(worker->id(), 1);
  auto blocked = remote.call(&GatedWorker::wait_for_gate);
  ASSERT_TRUE(gate.wait_entered(1));
  // Node 1 goes away with the call in flight: its connections close first,
  // then it waits for the running call, which the gate holds.
  std::thread shutdown([&] { a_.reset(); });
  auto r = std::move(blocked).get(absl::Seconds(10));
  // Reported before the call failed: a caller that asks the head about the
  // node once its call failed finds it told already.
  const int reported_by_then = reported.load();
  gate.open();
  shutdown.join();
  EXPECT_TRUE(IsActorDied(r.status())) << r.status();
  EXPECT_EQ(reported_by_then, 1);
}

INSTANTIATE_TEST_SUITE_P(DataPlane, NodeTest, ::testing::Values("tcp", "ucx"),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

}  // namespace
}  // namespace troupe::cluster
