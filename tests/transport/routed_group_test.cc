// RoutedGroup (transport/collectives/routed_group.h): each operation goes
// where its buffers live - host memory over the host transport, device memory
// through the device communicator or staged through host memory - with the
// device backend a stand-in made of host memory (fake_device_collectives.h)
// that encodes its "device" bytes, so that a buffer sent the wrong way gives
// wrong sums. Ranks are threads over inproc transports and an in-memory
// store, as in the other collectives tests.
#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <numeric>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tests/transport/fake_device_collectives.h"
#include "tests/transport/transport_test_util.h"
#include "transport/collectives/routed_group.h"

namespace troupe::transport::testing {
namespace {

constexpr absl::Duration kTimeout = absl::Seconds(20);

struct Member {
  int device = -1;  // -1: host only
  FakeDeviceCollectives* backend = nullptr;
};

absl::Status expect(bool ok, const std::string& what) {
  return ok ? absl::OkStatus() : absl::InternalError(what);
}

// Forms a RoutedGroup of members.size() ranks (one thread each, generation
// `generation` of group `name` in `store`) and runs body(group) on each;
// returns each rank's status, formation errors included.
std::vector<absl::Status> run_routed(const std::vector<Member>& members,
                                     const std::function<absl::Status(RoutedGroup&)>& body,
                                     InMemoryStore* shared_store = nullptr, uint64_t generation = 0,
                                     absl::Duration timeout = kTimeout) {
  static std::atomic<int> runs{0};
  const int run = runs.fetch_add(1);
  InMemoryStore own_store;
  InMemoryStore& store = shared_store != nullptr ? *shared_store : own_store;
  const int n = static_cast<int>(members.size());
  std::vector<absl::Status> results(static_cast<size_t>(n));
  std::atomic<int> finished{0};
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      absl::Status& result = results[static_cast<size_t>(r)];
      const std::string group = absl::StrCat("routed-", shared_store != nullptr ? 0 : run);
      bool counted = false;  // in `finished`
      [&] {
        auto agreed = RoutedGroup::agree(store, {.group = group,
                                                 .generation = generation,
                                                 .rank = r,
                                                 .size = n,
                                                 .device = members[static_cast<size_t>(r)].device,
                                                 .backend = members[static_cast<size_t>(r)].backend,
                                                 .timeout = timeout});
        if (!agreed.ok()) {
          result = agreed.status();
          return;
        }
        auto transport = make_transport("inproc", options_with(kToken, absl::StrCat("rank ", r)));
        if (!transport.ok()) {
          result = transport.status();
          return;
        }
        auto host = Group::create(
            **transport, store,
            {.rank = r,
             .size = n,
             .group = group,
             .generation = generation,
             .listen_address = absl::StrCat("inproc://routed-", run, "-", generation, "-", r),
             .timeout = timeout});
        if (!host.ok()) {
          result = host.status();
          return;
        }
        auto routed = RoutedGroup::create(*std::move(host), store, *agreed);
        if (!routed.ok()) {
          result = routed.status();
          return;
        }
        result = body(**routed);
        // Stay until every rank is done (see collectives_group_util.h).
        finished.fetch_add(1);
        counted = true;
        absl::Time deadline = absl::Now() + absl::Seconds(60);
        while (finished.load() < n && absl::Now() < deadline)
          std::this_thread::yield();
      }();
      if (!counted) finished.fetch_add(1);
    });
  }
  for (auto& t : threads)
    t.join();
  return results;
}

void expect_all_ok(const std::vector<absl::Status>& results) {
  for (size_t r = 0; r < results.size(); ++r)
    EXPECT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r];
}

// Every operation on device buffers, each checked against its closed form:
// rank r contributes r + 1 (and r + 1 + i / 1000 where the position matters).
absl::Status every_operation_on_the_device(RoutedGroup& g, FakeDeviceCollectives& fake) {
  const int n = g.size();
  const int r = g.rank();
  const int d = g.device();
  const size_t count = 1000;
  const float sum = static_cast<float>(n * (n + 1) / 2);

  // allreduce, sum and avg
  void* data = fake.allocate_with(d, std::vector<float>(count, static_cast<float>(r + 1)));
  if (absl::Status s = g.allreduce_async(DType::kFloat32, ReduceOp::kSum, data, count).wait();
      !s.ok())
    return s;
  for (float x : fake.read<float>(data, count))
    if (absl::Status s = expect(x == sum, absl::StrCat("allreduce gave ", x)); !s.ok()) return s;
  fake.upload(data, std::vector<float>(count, static_cast<float>(r + 1)).data(), count * 4);
  if (absl::Status s = g.allreduce_async(DType::kFloat32, ReduceOp::kAvg, data, count).wait();
      !s.ok())
    return s;
  for (float x : fake.read<float>(data, count))
    if (absl::Status s = expect(x == sum / static_cast<float>(n), absl::StrCat("avg gave ", x));
        !s.ok())
      return s;

  // reduce_scatter: block b of rank r holds (r + 1) * (b + 1)
  std::vector<float> blocks(count * static_cast<size_t>(n));
  for (size_t i = 0; i < blocks.size(); ++i)
    blocks[i] = static_cast<float>((r + 1) * (static_cast<int>(i / count) + 1));
  void* input = fake.allocate_with(d, blocks);
  void* output = fake.allocate(d, count * 4);
  if (absl::Status s =
          g.reduce_scatter_async(DType::kFloat32, ReduceOp::kSum, input, output, count).wait();
      !s.ok())
    return s;
  for (float x : fake.read<float>(output, count))
    if (absl::Status s =
            expect(x == sum * static_cast<float>(r + 1), absl::StrCat("reduce_scatter gave ", x));
        !s.ok())
      return s;

  // allgather: rank r sends bytes r, r+1, ...
  std::vector<uint8_t> mine(100);
  std::iota(mine.begin(), mine.end(), static_cast<uint8_t>(r));
  void* part = fake.allocate_with(d, mine);
  void* whole = fake.allocate(d, mine.size() * static_cast<size_t>(n));
  if (absl::Status s = g.allgather_async(part, whole, mine.size()).wait(); !s.ok()) return s;
  std::vector<uint8_t> gathered = fake.read<uint8_t>(whole, mine.size() * static_cast<size_t>(n));
  for (size_t i = 0; i < gathered.size(); ++i) {
    const auto want = static_cast<uint8_t>(i / mine.size() + i % mine.size());
    if (absl::Status s = expect(gathered[i] == want, absl::StrCat("allgather byte ", i)); !s.ok())
      return s;
  }

  // broadcast from the last rank
  std::vector<int32_t> value(33, r == n - 1 ? 7 : -1);
  void* shared = fake.allocate_with(d, value);
  if (absl::Status s = g.broadcast_async(shared, value.size() * 4, n - 1).wait(); !s.ok()) return s;
  for (int32_t x : fake.read<int32_t>(shared, value.size()))
    if (absl::Status s = expect(x == 7, absl::StrCat("broadcast gave ", x)); !s.ok()) return s;

  // the v forms (staged on every path)
  std::vector<size_t> counts(static_cast<size_t>(n));
  for (int b = 0; b < n; ++b)
    counts[static_cast<size_t>(b)] = static_cast<size_t>(b + 1);
  const size_t total = static_cast<size_t>(n * (n + 1) / 2);
  void* v_input = fake.allocate_with(d, std::vector<float>(total, static_cast<float>(r + 1)));
  void* v_output = fake.allocate(d, counts[static_cast<size_t>(r)] * 4);
  if (absl::Status s =
          g.reduce_scatter_v_async(DType::kFloat32, ReduceOp::kSum, v_input, v_output, counts)
              .wait();
      !s.ok())
    return s;
  for (float x : fake.read<float>(v_output, counts[static_cast<size_t>(r)]))
    if (absl::Status s = expect(x == sum, absl::StrCat("reduce_scatter_v gave ", x)); !s.ok())
      return s;
  std::vector<size_t> sizes(counts);
  void* v_part = fake.allocate_with(
      d, std::vector<uint8_t>(counts[static_cast<size_t>(r)], static_cast<uint8_t>(r + 1)));
  void* v_whole = fake.allocate(d, total);
  if (absl::Status s = g.allgather_v_async(v_part, v_whole, sizes).wait(); !s.ok()) return s;
  std::vector<uint8_t> v_gathered = fake.read<uint8_t>(v_whole, total);
  size_t at = 0;
  for (int b = 0; b < n; ++b) {
    for (size_t i = 0; i < counts[static_cast<size_t>(b)]; ++i, ++at) {
      if (absl::Status s = expect(v_gathered[at] == b + 1, absl::StrCat("allgather_v byte ", at));
          !s.ok())
        return s;
    }
  }

  // point to point round a ring: even ranks send first (pairs as NCCL needs)
  if (n > 1) {
    const int next = (r + 1) % n;
    const int previous = (r + n - 1) % n;
    void* out = fake.allocate_with(d, std::vector<int32_t>(10, r));
    void* in = fake.allocate(d, 40);
    Work sent, received;
    if (r % 2 == 0) {
      sent = g.send_borrowed_async(next, 5, out, 40);
      received = g.recv_async(previous, 5, in, 40);
    } else {
      received = g.recv_async(previous, 5, in, 40);
      sent = g.send_borrowed_async(next, 5, out, 40);
    }
    if (absl::Status s = sent.wait(); !s.ok()) return s;
    if (absl::Status s = received.wait(); !s.ok()) return s;
    for (int32_t x : fake.read<int32_t>(in, 10))
      if (absl::Status s = expect(x == previous, absl::StrCat("recv gave ", x)); !s.ok()) return s;
  }

  // and host buffers in the same group go the host way
  std::vector<float> host(count, static_cast<float>(r + 1));
  if (absl::Status s =
          g.allreduce_async(DType::kFloat32, ReduceOp::kSum, host.data(), host.size()).wait();
      !s.ok())
    return s;
  for (float x : host)
    if (absl::Status s = expect(x == sum, absl::StrCat("host allreduce gave ", x)); !s.ok())
      return s;
  return g.barrier_async().wait();
}

TEST(RoutedGroupTest, TheStandInCatchesADeviceBufferSentTheHostWay) {
  // What makes the tests below mean something: the host collectives on the
  // stand-in's device memory give wrong sums.
  FakeDeviceCollectives fake(2);
  auto results = run_routed({{-1, nullptr}, {-1, nullptr}}, [&](RoutedGroup& g) {
    void* data = fake.allocate_with(0, std::vector<float>(64, static_cast<float>(g.rank() + 1)));
    absl::Status s = g.allreduce_async(DType::kFloat32, ReduceOp::kSum, data, 64).wait();
    if (!s.ok()) return s;
    return expect(fake.read<float>(data, 64)[0] != 3.0f, "the host sum of encoded bytes was right");
  });
  expect_all_ok(results);
}

TEST(RoutedGroupTest, AHostOnlyGroupNeverAsksTheBackend) {
  FakeDeviceCollectives fake(2);
  auto results = run_routed({{-1, &fake}, {-1, &fake}, {-1, &fake}}, [&](RoutedGroup& g) {
    if (absl::Status s = expect(g.path() == DevicePath::kNone && g.device() == -1, "path"); !s.ok())
      return s;
    std::vector<float> data(1000, static_cast<float>(g.rank() + 1));
    if (absl::Status s =
            g.allreduce_async(DType::kFloat32, ReduceOp::kSum, data.data(), data.size()).wait();
        !s.ok())
      return s;
    return expect(data[999] == 6.0f, absl::StrCat("allreduce gave ", data[999]));
  });
  expect_all_ok(results);
  EXPECT_EQ(fake.communicators(), 0);
  EXPECT_EQ(fake.device_operations(), 0);
  EXPECT_EQ(fake.copies_to_host() + fake.copies_to_device(), 0);
  EXPECT_FALSE(device_collectives_loaded());
}

class RoutedGroupRanksTest : public ::testing::TestWithParam<int> {};

TEST_P(RoutedGroupRanksTest, MembersWithDevicesOfTheirOwnUseTheDeviceCommunicator) {
  const int n = GetParam();
  FakeDeviceCollectives fake(n);
  std::vector<Member> members;
  for (int r = 0; r < n; ++r)
    members.push_back({r, &fake});
  auto results = run_routed(members, [&](RoutedGroup& g) {
    if (absl::Status s =
            expect(g.path() == DevicePath::kDevice && g.path_reason().empty(),
                   absl::StrCat("path ", std::string(to_string(g.path())), " ", g.path_reason()));
        !s.ok())
      return s;
    const uint64_t before = g.collectives_issued();
    if (absl::Status s = every_operation_on_the_device(g, fake); !s.ok()) return s;
    // Device collectives count as issued: 2 allreduces, reduce_scatter,
    // allgather, broadcast, the two v forms, the host allreduce and barrier.
    return expect(g.collectives_issued() - before == 9,
                  absl::StrCat("collectives issued: ", g.collectives_issued() - before));
  });
  expect_all_ok(results);
  EXPECT_EQ(fake.communicators(), n);
  // Per rank: 2 allreduces, reduce_scatter, allgather, broadcast, and a send
  // and a receive when there are peers.
  EXPECT_EQ(fake.device_operations(), n * (n > 1 ? 7 : 5));
  // Only the v forms were staged: in and out, each rank.
  EXPECT_EQ(fake.copies_to_host(), 2 * n);
  EXPECT_EQ(fake.copies_to_device(), 2 * n);
}

INSTANTIATE_TEST_SUITE_P(Ranks, RoutedGroupRanksTest, ::testing::Values(1, 2, 3, 4),
                         [](const auto& param) { return absl::StrCat(param.param, "ranks"); });

TEST(RoutedGroupTest, RanksSharingADeviceAreStaged) {
  FakeDeviceCollectives fake(1);
  auto results = run_routed({{0, &fake}, {0, &fake}}, [&](RoutedGroup& g) {
    if (absl::Status s =
            expect(g.path() == DevicePath::kStaged &&
                       g.path_reason() == "ranks 0 and 1 share device fake-gpu0",
                   absl::StrCat("path ", std::string(to_string(g.path())), ": ", g.path_reason()));
        !s.ok())
      return s;
    return every_operation_on_the_device(g, fake);
  });
  expect_all_ok(results);
  EXPECT_EQ(fake.communicators(), 0);
  EXPECT_EQ(fake.device_operations(), 0);
  EXPECT_GT(fake.copies_to_host(), 0);
}

TEST(RoutedGroupTest, AHostOnlyMemberMakesTheOthersStage) {
  // Ranks 0 and 2 have devices (of two machines); rank 1 has none and passes
  // host buffers.
  FakeDeviceCollectives a(1, "a"), b(1, "b");
  auto results = run_routed({{0, &a}, {-1, nullptr}, {0, &b}}, [&](RoutedGroup& g) {
    if (g.rank() == 1) {
      if (absl::Status s = expect(g.path() == DevicePath::kNone, "rank 1's path"); !s.ok())
        return s;
      std::vector<float> data(500, 2.0f);
      if (absl::Status s =
              g.allreduce_async(DType::kFloat32, ReduceOp::kMax, data.data(), data.size()).wait();
          !s.ok())
        return s;
      return expect(data[0] == 3.0f, absl::StrCat("host rank got ", data[0]));
    }
    FakeDeviceCollectives& fake = g.rank() == 0 ? a : b;
    if (absl::Status s =
            expect(g.path() == DevicePath::kStaged && g.path_reason() == "rank 1 has no device",
                   g.path_reason());
        !s.ok())
      return s;
    void* data = fake.allocate_with(0, std::vector<float>(500, static_cast<float>(g.rank() + 1)));
    if (absl::Status s = g.allreduce_async(DType::kFloat32, ReduceOp::kMax, data, 500).wait();
        !s.ok())
      return s;
    return expect(fake.read<float>(data, 500)[499] == 3.0f, "device rank's max");
  });
  expect_all_ok(results);
  EXPECT_EQ(a.communicators() + b.communicators(), 0);
}

TEST(RoutedGroupTest, BuffersOnTwoSidesOrAnotherDeviceAreRefused) {
  FakeDeviceCollectives fake(2);
  auto results = run_routed({{0, &fake}}, [&](RoutedGroup& g) {
    void* device = fake.allocate(0, 64);
    void* other = fake.allocate(1, 64);
    std::vector<std::byte> host(64);
    absl::Status mixed = g.allgather_async(device, host.data(), 64).wait();
    if (absl::Status s = expect(
            absl::IsInvalidArgument(mixed) && absl::StrContains(mixed.message(), "host memory"),
            mixed.ToString());
        !s.ok())
      return s;
    absl::Status elsewhere = g.broadcast_async(other, 64, 0).wait();
    if (absl::Status s = expect(absl::IsInvalidArgument(elsewhere) &&
                                    absl::StrContains(elsewhere.message(), "device 1"),
                                elsewhere.ToString());
        !s.ok())
      return s;
    absl::Status self = g.send_async(0, 1, device, 64).wait();
    if (absl::Status s = expect(absl::IsInvalidArgument(self), self.ToString()); !s.ok()) return s;
    // None of it failed the group.
    if (absl::Status s = g.failed(); !s.ok()) return s;
    return g.allreduce_async(DType::kFloat32, ReduceOp::kSum, device, 16).wait();
  });
  expect_all_ok(results);
}

TEST(RoutedGroupTest, AMemberThatCannotUseItsDeviceFailsEveryMemberAtOnce) {
  FakeDeviceCollectives fake(2);
  const absl::Time start = absl::Now();
  auto results =
      run_routed({{5, &fake}, {1, &fake}}, [](RoutedGroup&) { return absl::OkStatus(); });
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_TRUE(absl::IsFailedPrecondition(results[0])) << results[0];
  EXPECT_TRUE(absl::StrContains(results[0].message(), "cannot use device 5: fake:5 asked for"))
      << results[0];
  EXPECT_TRUE(absl::IsFailedPrecondition(results[1])) << results[1];
  EXPECT_TRUE(absl::StrContains(results[1].message(), "rank 0 cannot use its device"))
      << results[1];
}

TEST(RoutedGroupTest, AbortFailsPendingDeviceWorkOnEveryMember) {
  FakeDeviceCollectives fake(2);
  std::atomic<bool> issued{false};
  auto results = run_routed({{0, &fake}, {1, &fake}}, [&](RoutedGroup& g) {
    void* data = fake.allocate(g.device(), 4096);
    if (g.rank() == 0) {
      // Rank 1 never issues it: pending on the device until the abort.
      Work work = g.allreduce_async(DType::kFloat32, ReduceOp::kSum, data, 1024);
      while (!issued.load())
        absl::SleepFor(absl::Milliseconds(1));
      absl::SleepFor(absl::Milliseconds(50));
      if (absl::Status s = expect(!work.done(), "the allreduce finished alone"); !s.ok()) return s;
      g.abort(absl::AbortedError("stopped by the test"));
      absl::Status s = work.wait(absl::Seconds(5));
      if (absl::Status e =
              expect(absl::IsAborted(s) && absl::StrContains(s.message(), "stopped"), s.ToString());
          !e.ok())
        return e;
      return expect(absl::IsAborted(g.failed()), g.failed().ToString());
    }
    // Rank 1 waits on a device receive that rank 0 never sends: the abort
    // reaches it through the host group, which aborts its communicator.
    Work work = g.recv_async(0, 9, data, 4096);
    issued.store(true);
    absl::Status s = work.wait(absl::Seconds(5));
    if (absl::Status e = expect(absl::IsAborted(s), s.ToString()); !e.ok()) return e;
    if (absl::Status e = expect(absl::IsAborted(g.failed()), g.failed().ToString()); !e.ok())
      return e;
    // And later device work fails at once.
    absl::Status later = g.allreduce_async(DType::kFloat32, ReduceOp::kSum, data, 4).wait();
    return expect(absl::IsAborted(later), later.ToString());
  });
  expect_all_ok(results);
}

TEST(RoutedGroupTest, ADeviceOperationPastItsTimeoutAbortsTheGroup) {
  FakeDeviceCollectives fake(2);
  auto results = run_routed(
      {{0, &fake}, {1, &fake}},
      [&](RoutedGroup& g) {
        void* data = fake.allocate(g.device(), 64);
        if (g.rank() == 0) {
          absl::Status s =
              g.allreduce_async(DType::kFloat32, ReduceOp::kSum, data, 16).wait(absl::Seconds(10));
          if (absl::Status e = expect(absl::IsDeadlineExceeded(s), s.ToString()); !e.ok()) return e;
        }
        // Both members see the group failed: rank 0 told rank 1.
        const absl::Time deadline = absl::Now() + absl::Seconds(10);
        while (g.failed().ok() && absl::Now() < deadline)
          absl::SleepFor(absl::Milliseconds(5));
        return expect(!g.failed().ok(), "the group did not fail");
      },
      nullptr, 0, absl::Milliseconds(500));
  expect_all_ok(results);
}

TEST(RoutedGroupTest, DeviceAndStagedOperationsKeepTheirIssueOrder) {
  // On the device path the v forms are staged through the host group: they
  // wait for the device work before them, and device work after them waits
  // for them, so a chain issued without waits computes as written.
  FakeDeviceCollectives fake(3);
  auto results = run_routed({{0, &fake}, {1, &fake}, {2, &fake}}, [&](RoutedGroup& g) {
    const int n = g.size();
    void* x = fake.allocate_with(g.device(), std::vector<float>(1, static_cast<float>(g.rank())));
    void* gathered = fake.allocate(g.device(), 4 * static_cast<size_t>(n));
    std::vector<size_t> sizes(static_cast<size_t>(n), 4);
    Work a = g.allreduce_async(DType::kFloat32, ReduceOp::kSum, x, 1);         // x = 0 + 1 + 2
    Work b = g.allgather_v_async(x, gathered, sizes);                          // 3, 3, 3
    Work c = g.allreduce_async(DType::kFloat32, ReduceOp::kSum, gathered, 3);  // 9, 9, 9
    for (Work* w : {&a, &b, &c})
      if (absl::Status s = w->wait(); !s.ok()) return s;
    for (float v : fake.read<float>(gathered, 3))
      if (absl::Status s = expect(v == 9.0f, absl::StrCat("the chain gave ", v)); !s.ok()) return s;
    return absl::OkStatus();
  });
  expect_all_ok(results);
}

TEST(RoutedGroupTest, ANewGenerationFormsANewCommunicatorAfterAnAbort) {
  FakeDeviceCollectives fake(2);
  InMemoryStore store;
  auto first = run_routed(
      {{0, &fake}, {1, &fake}},
      [&](RoutedGroup& g) {
        if (g.rank() == 0) g.abort(absl::AbortedError("a member was lost"));
        const absl::Time deadline = absl::Now() + absl::Seconds(10);
        while (g.failed().ok() && absl::Now() < deadline)
          absl::SleepFor(absl::Milliseconds(5));
        return expect(absl::IsAborted(g.failed()), g.failed().ToString());
      },
      &store, 0);
  expect_all_ok(first);
  auto second = run_routed(
      {{0, &fake}, {1, &fake}},
      [&](RoutedGroup& g) {
        if (absl::Status s = expect(g.generation() == 1 && g.failed().ok(), "generation 1");
            !s.ok())
          return s;
        void* data = fake.allocate_with(g.device(), std::vector<float>(8, 1.0f));
        if (absl::Status s = g.allreduce_async(DType::kFloat32, ReduceOp::kSum, data, 8).wait();
            !s.ok())
          return s;
        return expect(fake.read<float>(data, 8)[7] == 2.0f, "generation 1's sum");
      },
      &store, 1);
  expect_all_ok(second);
  EXPECT_EQ(fake.communicators(), 4);
}

}  // namespace
}  // namespace troupe::transport::testing
