// Bounded mailboxes: a producer flooding a slow actor is held back, so memory
// stays bounded; send timeouts turn a stuck consumer into an error.
#include <gtest/gtest.h>

#include <unistd.h>
#include <atomic>
#include <fstream>
#include <string>
#include <thread>

#include "tests/core/test_actors.h"

namespace troupe::testing {
namespace {

constexpr absl::Duration kWait = absl::Seconds(60);

// A payload that counts how many instances are alive at once.
std::atomic<long> live_payloads{0};
std::atomic<long> peak_payloads{0};

struct Payload {
  static constexpr size_t kBytes = 16384;
  Payload() : bytes(kBytes, 'x') { track(); }
  Payload(const Payload& o) : bytes(o.bytes) { track(); }
  Payload(Payload&& o) noexcept : bytes(std::move(o.bytes)) { track(); }
  ~Payload() { live_payloads--; }
  static void track() {
    long now = ++live_payloads;
    long peak = peak_payloads.load();
    while (now > peak && !peak_payloads.compare_exchange_weak(peak, now)) {
    }
  }
  std::string bytes;
};

// Spends about `work` on every message, so any producer outruns it.
class SlowConsumer {
 public:
  explicit SlowConsumer(absl::Duration work) : work_(work) {}
  void consume(const Payload& p) {
    absl::Time until = absl::Now() + work_;
    while (absl::Now() < until) {
    }
    bytes_ += static_cast<long>(p.bytes.size());
    ++count_;
  }
  long count() const { return count_; }
  // Holds this actor until `blocker` answers (its gate opens).
  void wait_for(ActorRef<GatedWorker> blocker) {
    static_cast<void>(blocker.call(&GatedWorker::wait_for_gate).get(absl::Seconds(60)));
  }

 private:
  absl::Duration work_;
  long bytes_ = 0;
  long count_ = 0;
};
TROUPE_ACTOR(SlowConsumer, &SlowConsumer::consume, &SlowConsumer::count, &SlowConsumer::wait_for);

long resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  long pages_total = 0, pages_resident = 0;
  statm >> pages_total >> pages_resident;
  return pages_resident * sysconf(_SC_PAGESIZE);
}

struct FloodResult {
  long peak_payloads;   // messages alive at once, at most
  long rss_growth;      // resident bytes gained during the flood
  uint64_t full_waits;  // sends that found the mailbox full
};

// One producer sends `messages` payloads to a consumer that spends 50us on
// each. With `gated`, the consumer does not start until every send returned.
FloodResult flood(size_t capacity, int messages, bool gated) {
  ActorSystem system({.threads = 2});
  Gate gate;
  auto consumer =
      system.spawn<SlowConsumer>({.mailbox_capacity = capacity}, absl::Microseconds(50));
  auto blocker = system.spawn<GatedWorker>({}, &gate);
  EXPECT_TRUE(consumer.ok() && blocker.ok());
  if (gated) consumer->tell(&SlowConsumer::wait_for, *blocker);
  live_payloads = 0;
  peak_payloads = 0;
  long rss_before = resident_bytes();
  long rss_peak = rss_before;
  Payload payload;
  for (int i = 0; i < messages; ++i) {
    consumer->tell(&SlowConsumer::consume, payload);
    if (i % 256 == 0) rss_peak = std::max(rss_peak, resident_bytes());
  }
  rss_peak = std::max(rss_peak, resident_bytes());
  gate.open();
  EXPECT_EQ(*consumer->call(&SlowConsumer::count).get(kWait), messages);
  return FloodResult{peak_payloads.load() - 1, rss_peak - rss_before, system.full_mailbox_waits()};
}

TEST(BackpressureTest, FloodingProducerKeepsMemoryBounded) {
  constexpr size_t kCapacity = 32;
  constexpr int kMessages = 4000;  // 64 MB of payload if nothing held the producer back
  FloodResult bounded = flood(kCapacity, kMessages, /*gated=*/false);
  EXPECT_GT(bounded.full_waits, 0u) << "the producer never had to wait: nothing was measured";
  // Mailbox invariant: at most about 2 x capacity messages held, plus slack
  // for the message being sent and the one being processed.
  EXPECT_LE(bounded.peak_payloads, static_cast<long>(2 * kCapacity + 4));
  EXPECT_LT(bounded.rss_growth, 16L << 20) << "resident memory grew by " << bounded.rss_growth;

  // What the same flood holds when the mailbox never binds and the consumer
  // has not started: all of it. The measurement above would have seen that.
  FloodResult unbounded = flood(1 << 20, kMessages, /*gated=*/true);
  EXPECT_GE(unbounded.peak_payloads, kMessages);
  EXPECT_GT(unbounded.rss_growth, 32L << 20);
  std::printf(
      "peak messages held: capacity %zu -> %ld (rss +%ld KiB, %lu full-mailbox waits); "
      "unbounded -> %ld (rss +%ld KiB)\n",
      kCapacity, bounded.peak_payloads, bounded.rss_growth >> 10,
      static_cast<unsigned long>(bounded.full_waits), unbounded.peak_payloads,
      unbounded.rss_growth >> 10);
}

TEST(BackpressureTest, SendTimeoutOnStuckConsumerIsResourceExhausted) {
  ActorSystem system({.threads = 2});
  Gate gate;
  auto worker = system.spawn<GatedWorker>(
      {.mailbox_capacity = 4, .send_timeout = absl::Milliseconds(50)}, &gate);
  ASSERT_TRUE(worker.ok());
  Future<bool> stuck = worker->call(&GatedWorker::wait_for_gate);
  ASSERT_TRUE(gate.wait_entered(1));
  std::vector<Future<int>> queued;
  absl::Status overflow;
  for (int i = 0; i < 64 && overflow.ok(); ++i) {
    Future<int> f = worker->call(&GatedWorker::echo, i);
    if (f.ready()) {
      overflow = f.get().status();
    } else {
      queued.push_back(std::move(f));
    }
  }
  EXPECT_EQ(overflow.code(), absl::StatusCode::kResourceExhausted) << overflow;
  EXPECT_NE(overflow.message().find("stayed full"), absl::string_view::npos);
  EXPECT_LE(queued.size(), 8u);
  gate.open();
  EXPECT_TRUE(*stuck.get(kWait));
  for (size_t i = 0; i < queued.size(); ++i)
    EXPECT_EQ(*queued[i].get(kWait), static_cast<int>(i));
}

TEST(BackpressureTest, BlockedSenderIsReleasedWhenActorDies) {
  ActorSystem system({.threads = 2});
  Gate gate;
  auto worker = system.spawn<GatedWorker>({.mailbox_capacity = 2}, &gate);
  ASSERT_TRUE(worker.ok());
  Future<bool> stuck = worker->call(&GatedWorker::wait_for_gate);
  ASSERT_TRUE(gate.wait_entered(1));
  std::atomic<int> sent{0};
  std::thread sender([&] {
    for (int i = 0; i < 100; ++i) {
      worker->tell(&GatedWorker::echo, i);
      sent++;
    }
  });
  // The sender fills the mailbox and blocks well before 100.
  absl::Time deadline = absl::Now() + kWait;
  while (sent.load() < 2 && absl::Now() < deadline)
    std::this_thread::yield();
  system.kill(*worker);
  gate.open();
  sender.join();  // released: sends to a dead actor fail fast
  EXPECT_EQ(sent.load(), 100);
  EXPECT_TRUE(*stuck.get(kWait));
}

}  // namespace
}  // namespace troupe::testing
