// Group: asynchronous collectives with Work handles, run in the order they
// were issued while the caller goes on; point-to-point messages; abort of
// queued operations; bad arguments. Each on every transport, the first on
// transports x ranks x sizes.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <numeric>
#include <vector>

#include "tests/transport/collectives_group_util.h"
#include "transport/collectives/group.h"

namespace troupe::transport::testing {
namespace {

// Runs body(group) on n ranks over `kind`, each rank a thread, all on this
// host: through shared memory unless `shared_memory` is false.
std::vector<absl::Status> run_groups(const std::string& kind, int n,
                                     const std::function<absl::Status(Group&)>& body,
                                     bool shared_memory = true) {
  return run_group_owning(
      kind, n,
      [&](std::unique_ptr<Communicator> c) {
        Group group(std::move(c));
        return body(group);
      },
      0, shared_memory);
}

absl::Status expect(bool ok, const std::string& what) {
  return ok ? absl::OkStatus() : absl::InternalError(what);
}

class CollectiveGroupAsyncTest : public GroupShapeTest {};

TEST_P(CollectiveGroupAsyncTest, OperationsRunInOrderWhileTheCallerGoesOn) {
  const int n = ranks();
  const size_t count = this->count();
  auto results = run_groups(transport(), n, [&](Group& g) -> absl::Status {
    // Eight buffers in flight at once, each a different closed form.
    std::vector<std::vector<float>> buffers(8, std::vector<float>(count));
    std::vector<Work> works;
    const auto issued = std::chrono::steady_clock::now();
    for (size_t b = 0; b < buffers.size(); ++b) {
      std::fill(buffers[b].begin(), buffers[b].end(), static_cast<float>((g.rank() + 1) * (b + 1)));
      works.push_back(g.allreduce_async(DType::kFloat32, ReduceOp::kSum, buffers[b].data(), count));
    }
    // The caller's own work meanwhile.
    double busy = 0;
    for (int i = 0; i < 100000; ++i)
      busy += static_cast<double>(i) * 0.5;
    if (busy <= 0) return absl::InternalError("unreachable");
    for (size_t b = 0; b < works.size(); ++b) {
      if (absl::Status s = works[b].wait(); !s.ok()) return s;
      if (!works[b].done()) return absl::InternalError("waited for work is not done");
      // Finished after it was issued, before the wait returned, in issue order.
      const auto finished = works[b].finished_at();
      if (finished < issued || finished > std::chrono::steady_clock::now() ||
          (b > 0 && finished < works[b - 1].finished_at())) {
        return absl::InternalError(absl::StrCat("buffer ", b, ": finished_at out of order"));
      }
      float want = static_cast<float>(n * (n + 1) / 2 * static_cast<int>(b + 1));
      for (float x : buffers[b]) {
        if (x != want)
          return absl::InternalError(absl::StrCat("buffer ", b, ": ", x, " != ", want));
      }
    }
    // Every other operation, async then waited.
    std::vector<float> all(static_cast<size_t>(n));
    float mine = static_cast<float>(g.rank());
    if (absl::Status s = g.allgather_async(&mine, all.data(), sizeof(float)).wait(); !s.ok()) {
      return s;
    }
    for (int r = 0; r < n; ++r) {
      if (absl::Status s = expect(all[r] == static_cast<float>(r), "allgather"); !s.ok()) return s;
    }
    const int root = n > 1 ? 1 : 0;
    float root_value = g.rank() == root ? 42.0f : -1.0f;
    if (absl::Status s = g.broadcast(&root_value, sizeof(float), root); !s.ok()) return s;
    if (absl::Status s = expect(root_value == 42.0f, "broadcast"); !s.ok()) return s;
    std::vector<float> in(static_cast<size_t>(n) * 2, 1.0f);
    std::vector<float> out(2);
    if (absl::Status s =
            g.reduce_scatter(DType::kFloat32, ReduceOp::kMax, in.data(), out.data(), 2);
        !s.ok()) {
      return s;
    }
    if (absl::Status s = expect(out[0] == 1.0f && out[1] == 1.0f, "reduce_scatter"); !s.ok()) {
      return s;
    }
    return g.barrier();
  });
  for (int r = 0; r < n; ++r)
    EXPECT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r];
}

// Ranks: a group of one, where every operation stays local, and of three.
// Sizes: none, an odd length, and 300000 elements (1.2 MB a buffer).
INSTANTIATE_TEST_SUITE_P(Shapes, CollectiveGroupAsyncTest,
                         ::testing::Combine(::testing::ValuesIn(kTransports),
                                            ::testing::Values(1, 3),
                                            ::testing::Values<size_t>(0, 1003, 300000)),
                         shape_name);

class CollectiveGroupTest : public TransportTest {};

TEST_P(CollectiveGroupTest, PointToPointMessagesPassRoundARing) {
  const int n = 4;
  auto results = run_groups(GetParam(), n, [&](Group& g) -> absl::Status {
    const int right = (g.rank() + 1) % n;
    const int left = (g.rank() + n - 1) % n;
    std::vector<int> got(100, -1);
    Work receiving = g.recv_async(left, 7, got.data(), got.size() * sizeof(int));
    std::vector<int> sent(100);
    std::iota(sent.begin(), sent.end(), g.rank() * 1000);
    if (absl::Status s = g.send(right, 7, sent.data(), sent.size() * sizeof(int)); !s.ok()) {
      return s;
    }
    if (absl::Status s = receiving.wait(); !s.ok()) return s;
    for (int i = 0; i < 100; ++i) {
      if (got[i] != left * 1000 + i) return absl::InternalError("wrong message");
    }
    // A message of the wrong size is refused, and named.
    int one = 0;
    if (absl::Status s = g.send(right, 8, sent.data(), sizeof(int) * 2); !s.ok()) return s;
    absl::Status wrong = g.recv(left, 8, &one, sizeof(int));
    if (!absl::IsInvalidArgument(wrong)) {
      return absl::InternalError(absl::StrCat("wrong size: ", wrong.ToString()));
    }
    // Tags and peers out of range.
    if (!absl::IsInvalidArgument(g.send(n, 1, &one, sizeof(int))) ||
        !absl::IsInvalidArgument(g.recv(0, uint64_t{1} << 62, &one, sizeof(int)))) {
      return absl::InternalError("bad peer or tag accepted");
    }
    return absl::OkStatus();
  });
  for (int r = 0; r < n; ++r)
    EXPECT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r];
}

// A borrowed send is done once the transport let go of the caller's memory;
// a large receive in place posted before its message lands where it was
// asked to, without a copy, on the transport that can place payloads (UCX);
// elsewhere it arrives all the same, copied. A receive whose message did not
// land in place lets go of its placement: a later message under the same tag
// does not land there.
TEST_P(CollectiveGroupTest, BorrowedSendsAndReceivesPostedEarlyCopyNothingWhereTheyCan) {
  const int n = 2;
  constexpr size_t kFloats = 256 * 1024;  // 1 MiB: well above UCX's eager parts
  constexpr size_t kBytes = kFloats * sizeof(float);
  std::atomic<int> phase{0};  // how far rank 0 has got, for rank 1 to follow
  auto reach = [&](int p) {
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    while (phase.load() < p && absl::Now() < deadline)
      absl::SleepFor(absl::Milliseconds(1));
  };
  std::vector<uint64_t> in_place(n, 0);
  const bool inproc = GetParam() == "inproc";
  auto results = run_groups(GetParam(), n, [&](Group& g) -> absl::Status {
    std::vector<float> data(kFloats);
    if (g.rank() == 0) {
      std::fill(data.begin(), data.end(), -1.0f);
      Work receiving = g.recv_in_place_async(1, 11, data.data(), kBytes);
      phase.store(1);
      if (absl::Status s = receiving.wait(); !s.ok()) return s;
      for (size_t i = 0; i < kFloats; ++i) {
        if (data[i] != static_cast<float>(i)) return absl::InternalError("wrong payload");
      }
      in_place[0] = g.received_in_place();
      // The sender changes its memory once its send is done, then sends
      // again: the first payload here is untouched by that.
      float after = 0;
      if (absl::Status s = g.recv(1, 12, &after, sizeof(after)); !s.ok()) return s;
      if (after != 7.0f || data[0] != 0.0f) return absl::InternalError("the second message");
      // A message of the wrong size misses the placement, which goes with
      // its receive: the next message under the tag lands elsewhere.
      std::vector<float> other(kFloats, -2.0f);
      Work wrong = g.recv_in_place_async(1, 13, data.data(), kBytes);
      phase.store(2);
      if (!absl::IsInvalidArgument(wrong.wait())) return absl::InternalError("wrong size taken");
      phase.store(3);
      if (absl::Status s = g.recv(1, 13, other.data(), kBytes); !s.ok()) return s;
      if (other[9] != 5.0f || data[9] != 9.0f) {
        return absl::InternalError("the message after the missed placement landed in it");
      }
      if (inproc) {
        // The sender's borrowed send is not done until the message is taken
        // here: it lent its memory, it did not copy it.
        reach(4);
        float borrowed = 0;
        if (absl::Status s = g.recv(1, 14, &borrowed, sizeof(borrowed)); !s.ok()) return s;
        phase.store(5);
      }
      return absl::OkStatus();
    }
    std::iota(data.begin(), data.end(), 0.0f);
    reach(1);
    Work sending = g.send_borrowed_async(0, 11, data.data(), kBytes);
    if (absl::Status s = sending.wait(absl::Seconds(20)); !s.ok()) return s;
    data[0] = 7.0f;
    if (absl::Status s = g.send_borrowed_async(0, 12, data.data(), sizeof(float)).wait(); !s.ok()) {
      return s;
    }
    if (g.traffic().other != kBytes + sizeof(float)) {
      return absl::InternalError("borrowed sends not counted");
    }
    reach(2);
    std::vector<float> twice(2 * kFloats, 3.0f);
    if (absl::Status s = g.send(0, 13, twice.data(), 2 * kBytes); !s.ok()) return s;
    reach(3);
    std::vector<float> fives(kFloats, 5.0f);
    if (absl::Status s = g.send(0, 13, fives.data(), kBytes); !s.ok()) return s;
    if (inproc) {
      float x = 1;
      Work lent = g.send_borrowed_async(0, 14, &x, sizeof(x));
      const bool early = lent.done();
      phase.store(4);
      if (absl::Status s = lent.wait(absl::Seconds(20)); !s.ok()) return s;
      if (early) return absl::InternalError("a borrowed send done before its message was taken");
    }
    return absl::OkStatus();
  });
  for (int r = 0; r < n; ++r)
    EXPECT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r];
  if (GetParam() == "ucx") {
    EXPECT_EQ(in_place[0], kBytes);
  } else {
    EXPECT_EQ(in_place[0], 0u);  // nothing places payloads there
  }
}

// The traffic a rank reports is what the ring sends: of a reduce-scatter or
// allgather over n blocks, every block but one of its own, once; of a ring
// allreduce, both; point-to-point sends are counted apart. (Through the
// transport: shared memory sends nothing.)
TEST_P(CollectiveGroupTest, TrafficCountsWhatEachKindOfOperationSent) {
  const int n = 3;
  const size_t block = 100000;  // ring sizes (at least 64 KiB), several segments
  auto results = run_groups(
      GetParam(), n,
      [&](Group& g) -> absl::Status {
        std::vector<float> data(block * n, 1.0f), out(block * n);
        const Traffic start = g.traffic();
        if (absl::Status s = g.allreduce(DType::kFloat32, ReduceOp::kSum, data.data(), data.size(),
                                         Algorithm::kRing);
            !s.ok()) {
          return s;
        }
        if (absl::Status s =
                g.reduce_scatter(DType::kFloat32, ReduceOp::kSum, data.data(), out.data(), block);
            !s.ok()) {
          return s;
        }
        const size_t counts[] = {block, 2 * block, 0};
        if (absl::Status s = g.reduce_scatter_v_async(DType::kFloat32, ReduceOp::kSum, data.data(),
                                                      out.data(), counts)
                                 .wait();
            !s.ok()) {
          return s;
        }
        const size_t bytes[] = {4 * block, 8 * block, 0};
        if (absl::Status s = g.allgather_v_async(out.data(), data.data(), bytes).wait(); !s.ok()) {
          return s;
        }
        const int right = (g.rank() + 1) % n, left = (g.rank() + n - 1) % n;
        if (absl::Status s = g.send(right, 3, data.data(), 40); !s.ok()) return s;
        if (absl::Status s = g.recv(left, 3, out.data(), 40); !s.ok()) return s;
        const Traffic t = g.traffic() - start;
        // In bytes, the blocks of the _v operations are b, 2b and 0 of 3b. A
        // reduce-scatter rank m sends every block but block m; an allgather
        // rank every block but block m + 1.
        const uint64_t b = block * sizeof(float);
        const uint64_t sizes[] = {b, 2 * b, 0};
        const int m = g.rank();
        const Traffic want{.allreduce = 4 * b,
                           .reduce_scatter = 2 * b + 3 * b - sizes[m],
                           .allgather = 3 * b - sizes[(m + 1) % n],
                           .other = 40};
        if (t.allreduce != want.allreduce || t.reduce_scatter != want.reduce_scatter ||
            t.allgather != want.allgather || t.other != want.other) {
          return absl::InternalError(absl::StrCat(
              "rank ", m, ": allreduce ", t.allreduce, " reduce_scatter ", t.reduce_scatter,
              " allgather ", t.allgather, " other ", t.other, "; expected ", want.allreduce, ", ",
              want.reduce_scatter, ", ", want.allgather, ", ", want.other));
        }
        return absl::OkStatus();
      },
      /*shared_memory=*/false);
  for (int r = 0; r < n; ++r)
    EXPECT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r];
}

TEST_P(CollectiveGroupTest, AbortFailsRunningAndQueuedOperationsOnEveryMember) {
  const int n = 3;
  absl::Time start = absl::Now();
  std::vector<std::vector<absl::Status>> seen(n);
  std::atomic<int> queued{0};
  auto results = run_groups(GetParam(), n, [&](Group& g) -> absl::Status {
    std::vector<float> data(1000, 1.0f);
    std::vector<Work> works;
    if (g.rank() == 0) {
      // Rank 0 never takes part: the others' operations queue up behind a
      // first one that cannot finish, until rank 0 aborts.
      absl::Time deadline = absl::Now() + absl::Seconds(10);
      while (queued.load() < n - 1 && absl::Now() < deadline)
        std::this_thread::yield();
      if (absl::Status s = g.failed(); !s.ok()) return s;
      g.abort(absl::AbortedError("rank 0 gives up"));
      return expect(absl::IsAborted(g.failed()), "failed() is Aborted once the group is");
    }
    for (int i = 0; i < 5; ++i)
      works.push_back(g.allreduce_async(DType::kFloat32, ReduceOp::kSum, data.data(), data.size()));
    queued.fetch_add(1);
    for (Work& w : works)
      seen[g.rank()].push_back(w.wait(absl::Seconds(20)));
    return expect(absl::IsAborted(g.failed()), "failed() is Aborted once a member aborted");
  });
  for (int r = 0; r < n; ++r)
    EXPECT_TRUE(results[r].ok()) << results[r];
  for (int r = 1; r < n; ++r) {
    ASSERT_EQ(seen[r].size(), 5u);
    for (const absl::Status& s : seen[r])
      EXPECT_TRUE(absl::IsAborted(s)) << "rank " << r << ": " << s;
  }
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
}

TEST_P(CollectiveGroupTest, WaitWithATimeoutGivesUpWithoutStoppingTheOperation) {
  const int n = 2;
  auto results = run_groups(GetParam(), n, [&](Group& g) -> absl::Status {
    float x = 1;
    if (g.rank() == 1) {
      // Rank 1 joins late: rank 0's wait times out first, then succeeds.
      float y = 0;
      static_cast<void>(g.recv(0, 5, &y, sizeof(y)));
      return g.allreduce(DType::kFloat32, ReduceOp::kSum, &x, 1);
    }
    Work w = g.allreduce_async(DType::kFloat32, ReduceOp::kSum, &x, 1);
    absl::Status early = w.wait(absl::Milliseconds(50));
    if (!absl::IsDeadlineExceeded(early)) {
      return absl::InternalError(absl::StrCat("early wait: ", early.ToString()));
    }
    float go = 0;
    if (absl::Status s = g.send(1, 5, &go, sizeof(go)); !s.ok()) return s;
    if (absl::Status s = w.wait(); !s.ok()) return s;
    return expect(x == 2.0f, "sum after the late rank joined");
  });
  for (int r = 0; r < n; ++r)
    EXPECT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r];
}

INSTANTIATE_TEST_SUITE_P(Transports, CollectiveGroupTest, ::testing::ValuesIn(kTransports),
                         transport_name);

}  // namespace
}  // namespace troupe::transport::testing
