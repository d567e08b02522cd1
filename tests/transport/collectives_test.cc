// Ring allreduce over real transports: every rank a thread with a transport
// of its own, found through an in-memory rendezvous store. Results against
// closed forms, bitwise determinism, and abort.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/transport/transport_test_util.h"
#include "transport/collectives/communicator.h"
#include "transport/collectives/ring.h"

namespace troupe::transport::testing {
namespace {

std::string listen_address(const std::string& kind, int rank, int run) {
  if (kind == "inproc") return absl::StrCat("inproc://collectives-", run, "-", rank);
  return kind + "://127.0.0.1:0";
}

// Runs `body(comm)` on `n` ranks at once, each on its own thread and
// transport; returns each rank's status.
std::vector<absl::Status> run_group(const std::string& kind, int n,
                                    const std::function<absl::Status(Communicator&)>& body) {
  static std::atomic<int> runs{0};
  int run = runs.fetch_add(1);
  InMemoryStore store;
  std::vector<absl::Status> results(n);
  std::atomic<int> finished{0};
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      auto transport = make_transport(kind, options_with(kToken, absl::StrCat("rank ", r)));
      if (!transport.ok()) {
        results[r] = transport.status();
        finished.fetch_add(1);
        return;
      }
      auto comm = Communicator::create(**transport, store,
                                       {.rank = r,
                                        .size = n,
                                        .group = absl::StrCat("g", run),
                                        .listen_address = listen_address(kind, r, run),
                                        .timeout = absl::Seconds(30)});
      if (!comm.ok()) {
        results[r] = comm.status();
        finished.fetch_add(1);
        return;
      }
      results[r] = body(**comm);
      // Stay connected until every rank is done: a rank that leaves at once
      // tears down its transport before its last frames are delivered, and
      // the others would rightly see a member lost.
      finished.fetch_add(1);
      absl::Time deadline = absl::Now() + absl::Seconds(60);
      while (finished.load() < n && absl::Now() < deadline)
        std::this_thread::yield();
    });
  }
  for (auto& t : threads)
    t.join();
  return results;
}

class RingAllreduceTest : public ::testing::TestWithParam<std::string> {};

// Rank r contributes (r + 1) * (i % 7 + 1) at element i: sums, maxima and
// minima have closed forms and are exact in fp32.
float contribution(int rank, size_t i) {
  return static_cast<float>((rank + 1) * static_cast<int>(i % 7 + 1));
}

TEST_P(RingAllreduceTest, MatchesClosedFormsForEveryOpRankCountAndSize) {
  const size_t sizes[] = {0, 1, 4, 100, 1000, 10000};
  for (int n = 1; n <= 8; ++n) {
    for (size_t count : sizes) {
      std::vector<std::vector<float>> out(n);
      auto results = run_group(GetParam(), n, [&](Communicator& c) -> absl::Status {
        uint64_t seq = 0;
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kAvg}) {
          std::vector<float> data(count);
          for (size_t i = 0; i < count; ++i)
            data[i] = contribution(c.rank(), i);
          if (absl::Status s = ring_allreduce(c, DType::kFloat32, op, data.data(), count, seq++);
              !s.ok()) {
            return s;
          }
          out[c.rank()].insert(out[c.rank()].end(), data.begin(), data.end());
        }
        return absl::OkStatus();
      });
      for (int r = 0; r < n; ++r) {
        ASSERT_TRUE(results[r].ok()) << "n=" << n << " count=" << count << ": " << results[r];
        const std::vector<float>& got = out[r];
        ASSERT_EQ(got.size(), 4 * count);
        for (size_t i = 0; i < count; ++i) {
          float k = static_cast<float>(i % 7 + 1);
          ASSERT_EQ(got[i], k * static_cast<float>(n * (n + 1) / 2)) << "sum n=" << n << " i=" << i;
          ASSERT_EQ(got[count + i], k * static_cast<float>(n)) << "max n=" << n;
          ASSERT_EQ(got[2 * count + i], k) << "min n=" << n;
          ASSERT_NEAR(got[3 * count + i], k * static_cast<float>(n + 1) / 2.0f, 1e-5f * k * n)
              << "avg n=" << n;
        }
      }
    }
  }
}

TEST_P(RingAllreduceTest, LargeOddSizedBuffer) {
  const size_t count = (size_t{1} << 20) + 3;
  for (int n : {2, 3}) {
    std::vector<bool> right(n, false);
    auto results = run_group(GetParam(), n, [&](Communicator& c) -> absl::Status {
      std::vector<float> data(count);
      for (size_t i = 0; i < count; ++i)
        data[i] = contribution(c.rank(), i);
      absl::Status s = ring_allreduce(c, DType::kFloat32, ReduceOp::kSum, data.data(), count, 0);
      bool ok = true;
      for (size_t i = 0; i < count && ok; ++i)
        ok = data[i] == static_cast<float>(i % 7 + 1) * static_cast<float>(n * (n + 1) / 2);
      right[c.rank()] = ok;
      return s;
    });
    for (int r = 0; r < n; ++r) {
      ASSERT_TRUE(results[r].ok()) << results[r];
      EXPECT_TRUE(right[r]) << "rank " << r << " of " << n;
    }
  }
}

TEST_P(RingAllreduceTest, BitwiseIdenticalAcrossRunsAndRanks) {
  const int n = 5;
  const size_t count = 12345;
  auto reduce_random = [&] {
    std::vector<std::vector<float>> out(n);
    auto results = run_group(GetParam(), n, [&](Communicator& c) -> absl::Status {
      std::mt19937 gen(1234 + c.rank());
      std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
      std::vector<float> data(count);
      for (float& x : data)
        x = dist(gen);
      absl::Status s = ring_allreduce(c, DType::kFloat32, ReduceOp::kSum, data.data(), count, 0);
      out[c.rank()] = std::move(data);
      return s;
    });
    for (auto& s : results)
      EXPECT_TRUE(s.ok()) << s;
    return out;
  };
  auto first = reduce_random();
  auto second = reduce_random();
  for (int r = 0; r < n; ++r) {
    ASSERT_EQ(first[r].size(), count);
    EXPECT_EQ(std::memcmp(first[r].data(), first[0].data(), count * sizeof(float)), 0)
        << "rank " << r << " differs from rank 0";
    EXPECT_EQ(std::memcmp(first[r].data(), second[r].data(), count * sizeof(float)), 0)
        << "rank " << r << " differs between runs";
  }
}

TEST_P(RingAllreduceTest, AbortFailsEveryMemberWithAborted) {
  const int n = 4;
  std::atomic<int> finished{0};
  absl::Time start = absl::Now();
  auto results = run_group(GetParam(), n, [&](Communicator& c) -> absl::Status {
    std::vector<float> data(1000, 1.0f);
    if (c.rank() == 2) {
      // Rank 2 aborts the group instead of taking part, and stays up (an
      // aborting member is alive: a dead one is a lost member) until the
      // others have returned.
      c.abort(absl::AbortedError("rank 2 gives up"));
      absl::Status s = ring_allreduce(c, DType::kFloat32, ReduceOp::kSum, data.data(), 1000, 0);
      absl::Time deadline = absl::Now() + absl::Seconds(20);
      while (finished.load() < n - 1 && absl::Now() < deadline)
        std::this_thread::yield();
      return s;
    }
    absl::Status s = ring_allreduce(c, DType::kFloat32, ReduceOp::kSum, data.data(), 1000, 0);
    finished.fetch_add(1);
    return s;
  });
  for (int r = 0; r < n; ++r)
    EXPECT_TRUE(absl::IsAborted(results[r])) << "rank " << r << ": " << results[r];
  EXPECT_LT(absl::Now() - start, absl::Seconds(20)) << "aborting must not wait for the timeout";
}

INSTANTIATE_TEST_SUITE_P(Transports, RingAllreduceTest, ::testing::Values("inproc", "tcp"),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

}  // namespace
}  // namespace troupe::transport::testing
