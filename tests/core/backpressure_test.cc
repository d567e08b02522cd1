// Bounded mailboxes: a producer flooding a slow actor is held back, so memory
// stays bounded; send timeouts turn a stuck consumer into an error.
#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <string>
#include <thread>
#include <unistd.h>

#include "tests/core/test_actors.h"

namespace troupe::testing {
namespace {

constexpr absl::Duration kWait = absl::Seconds(60);

// A payload that counts how many instances are alive at once.
std::atomic<long> live_payloads{0};
std::atomic<long> peak_payloads{0};

struct Payload {
  static constexpr size_t kBytes = 4096;
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

 private:
  absl::Duration work_;
  long bytes_ = 0;
  long count_ = 0;
};
TROUPE_ACTOR(SlowConsumer, &SlowConsumer::consume, &SlowConsumer::count);

long resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  long pages_total = 0, pages_resident = 0;
  statm >> pages_total >> pages_resident;
  return pages_resident * sysconf(_SC_PAGESIZE);
}

struct FloodResult {
  long peak_payloads;
  long rss_growth;
};

FloodResult flood(size_t capacity, int messages) {
  ActorSystem system({.threads = 2});
  auto consumer = system.spawn<SlowConsumer>({.mailbox_capacity = capacity}, absl::Microseconds(5));
  EXPECT_TRUE(consumer.ok());
  live_payloads = 0;
  peak_payloads = 0;
  long rss_before = resident_bytes();
  long rss_peak = rss_before;
  Payload payload;
  for (int i = 0; i < messages; ++i) {
    consumer->tell(&SlowConsumer::consume, payload);
    if (i % 1024 == 0) rss_peak = std::max(rss_peak, resident_bytes());
  }
  EXPECT_EQ(*consumer->call(&SlowConsumer::count).get(kWait), messages);
  return FloodResult{peak_payloads.load() - 1, rss_peak - rss_before};
}

TEST(BackpressureTest, FloodingProducerKeepsMemoryBounded) {
  constexpr size_t kCapacity = 256;
  constexpr int kMessages = 20000;  // 80 MB of payload if nothing held the producer back
  FloodResult bounded = flood(kCapacity, kMessages);
  // Mailbox invariant: at most about 2 x capacity messages held, plus slack
  // for the message being sent and the one being processed.
  EXPECT_LE(bounded.peak_payloads, static_cast<long>(2 * kCapacity + 4));
  EXPECT_LT(bounded.rss_growth, 16L << 20) << "resident memory grew by " << bounded.rss_growth;

  // The same flood with a capacity that never binds holds far more: the bound
  // above is the mailbox's doing.
  FloodResult unbounded = flood(1 << 20, kMessages);
  EXPECT_GT(unbounded.peak_payloads, 10 * bounded.peak_payloads)
      << "a consumer 5us/message slower than the producer should fall far behind";
  std::printf("peak messages held: capacity %zu -> %ld (rss +%ld KiB); unbounded -> %ld (rss +%ld KiB)\n",
              kCapacity, bounded.peak_payloads, bounded.rss_growth >> 10,
              unbounded.peak_payloads, unbounded.rss_growth >> 10);
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
  for (size_t i = 0; i < queued.size(); ++i) EXPECT_EQ(*queued[i].get(kWait), static_cast<int>(i));
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
  while (sent.load() < 2 && absl::Now() < deadline) std::this_thread::yield();
  system.kill(*worker);
  gate.open();
  sender.join();  // released: sends to a dead actor fail fast
  EXPECT_EQ(sent.load(), 100);
  EXPECT_TRUE(*stuck.get(kWait));
}

}  // namespace
}  // namespace troupe::testing
