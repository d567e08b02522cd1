// Collective operations over real transports, in the manner of Gloo's tests
// (gloo/test/allreduce_test.cc): every operation x dtypes x algorithms against
// closed forms, one case for each shape of group - transports x ranks 1..8 x
// sizes - named for it ("Sizes/EveryOperationTest.MatchesClosedForms/
// tcp_4ranks_1000"), so that one can be rerun alone; bitwise determinism;
// abort.
#include <gtest/gtest.h>

#include <atomic>
#include <bit>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/transport/collectives_group_util.h"
#include "transport/collectives/collectives.h"

namespace troupe::transport::testing {
namespace {

// Rank r contributes (r + 1) * (i % 7 + 1) at element i: sums, maxima and
// minima have closed forms, exact in every dtype (sums stay below 256).
float contribution(int rank, size_t i) {
  return static_cast<float>((rank + 1) * static_cast<int>(i % 7 + 1));
}

// Elements of `type` stored as raw bytes.
struct Tensor {
  DType type;
  std::vector<std::byte> bytes;

  Tensor(DType t, size_t count) : type(t), bytes(count * element_size(t)) {}
  size_t count() const { return bytes.size() / element_size(type); }
  // Element i becomes contribution(rank, i).
  void fill(int rank) {
    const size_t n = count();
    for (size_t i = 0, k = 0; i < n; ++i, k = k == 6 ? 0 : k + 1)
      set(i, static_cast<float>((rank + 1) * static_cast<int>(k + 1)));
  }
  void* data() { return bytes.data(); }
  void set(size_t i, float v) {
    if (type == DType::kFloat32) [[likely]] {
      std::memcpy(&bytes[i * 4], &v, 4);
      return;
    }
    uint16_t h = type == DType::kFloat16 ? float_to_half(v) : float_to_bf16(v);
    std::memcpy(&bytes[i * 2], &h, 2);
  }
  // The element's bits, widened.
  uint32_t bits(size_t i) const {
    uint32_t b = 0;
    std::memcpy(&b, &bytes[i * element_size(type)], element_size(type));
    return b;
  }
};

// The bits of `v` rounded to `type`.
uint32_t bits_of(DType type, float v) {
  if (type == DType::kFloat32) return std::bit_cast<uint32_t>(v);
  return type == DType::kFloat16 ? float_to_half(v) : float_to_bf16(v);
}

float closed_form(ReduceOp op, int n, size_t i) {
  float k = static_cast<float>(i % 7 + 1);
  float sum = k * static_cast<float>(n * (n + 1) / 2);
  switch (op) {
    case ReduceOp::kSum:
      return sum;
    case ReduceOp::kAvg:
      return sum * (1.0f / static_cast<float>(n));  // as scale() computes it
    case ReduceOp::kMax:
      return k * static_cast<float>(n);
    case ReduceOp::kMin:
      return k;
  }
  return 0;
}

// The first element of `got` that is not `expected(i + base)`, as an error.
// Every expected value here depends on its index modulo 7 only.
absl::Status check(const std::string& what, const Tensor& got,
                   const std::function<float(size_t)>& expected, size_t base = 0) {
  uint32_t want[7];
  for (size_t k = 0; k < 7; ++k)
    want[k] = bits_of(got.type, expected(k));
  const size_t width = element_size(got.type);
  const size_t count = got.count();
  for (size_t i = 0, k = base % 7; i < count; ++i, k = k == 6 ? 0 : k + 1) {
    uint32_t bits = 0;
    if (width == 4) {
      std::memcpy(&bits, &got.bytes[i * 4], 4);
    } else {
      uint16_t h;
      std::memcpy(&h, &got.bytes[i * 2], 2);
      bits = h;
    }
    if (bits != want[k]) {
      return absl::InternalError(absl::StrCat(what, ": element ", i, " of ", count, " has bits ",
                                              bits, ", expected ", want[k]));
    }
  }
  return absl::OkStatus();
}

// Every operation, for every dtype and size, on one group.
absl::Status every_operation(Communicator& c, const std::vector<size_t>& sizes) {
  const int n = c.size();
  const int r = c.rank();
  for (DType type : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    for (size_t count : sizes) {
      const std::string where =
          absl::StrCat(std::string(to_string(type)), " x ", count, ", rank ", r, "/", n);
      for (Algorithm algorithm : {Algorithm::kAuto, Algorithm::kRing, Algorithm::kHalvingDoubling,
                                  Algorithm::kHierarchical}) {
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin}) {
          Tensor t(type, count);
          t.fill(r);
          std::string what = absl::StrCat("allreduce ", std::string(to_string(algorithm)), " ",
                                          std::string(to_string(op)), " ", where);
          if (absl::Status s = allreduce(c, type, op, t.data(), count, algorithm); !s.ok()) {
            return absl::Status(s.code(), absl::StrCat(what, ": ", s.message()));
          }
          if (absl::Status s = check(what, t, [&](size_t i) { return closed_form(op, n, i); });
              !s.ok()) {
            return s;
          }
        }
      }
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin}) {
        // Block b of rank r's input holds elements b * count .. of the whole.
        Tensor in(type, count * static_cast<size_t>(n));
        in.fill(r);
        Tensor out(type, count);
        std::string what = absl::StrCat("reduce_scatter ", std::string(to_string(op)), " ", where);
        if (absl::Status s = reduce_scatter(c, type, op, in.data(), out.data(), count); !s.ok()) {
          return absl::Status(s.code(), absl::StrCat(what, ": ", s.message()));
        }
        size_t base = static_cast<size_t>(r) * count;
        if (absl::Status s = check(
                what, out, [&](size_t i) { return closed_form(op, n, i); }, base);
            !s.ok()) {
          return s;
        }
      }
      {
        Tensor mine(type, count);
        mine.fill(r);
        Tensor all(type, count * static_cast<size_t>(n));
        std::string what = absl::StrCat("allgather ", where);
        if (absl::Status s = allgather(c, mine.data(), all.data(), mine.bytes.size()); !s.ok()) {
          return absl::Status(s.code(), absl::StrCat(what, ": ", s.message()));
        }
        for (int b = 0; b < n; ++b) {
          Tensor block(type, count);
          std::memcpy(block.data(), &all.bytes[static_cast<size_t>(b) * mine.bytes.size()],
                      mine.bytes.size());
          if (absl::Status s = check(absl::StrCat(what, ", block ", b), block,
                                     [&](size_t i) { return contribution(b, i); });
              !s.ok()) {
            return s;
          }
        }
      }
      // Blocks of uneven sizes, some empty: block i ends at total * (i + 1)^2 / n^2.
      std::vector<size_t> counts, offsets;
      for (size_t i = 0, total = count * static_cast<size_t>(n), at = 0; i < static_cast<size_t>(n);
           ++i) {
        const size_t end = total * (i + 1) * (i + 1) / (static_cast<size_t>(n) * n);
        offsets.push_back(at);
        counts.push_back(end - at);
        at = end;
      }
      const size_t own = counts[static_cast<size_t>(r)];
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
        Tensor in(type, count * static_cast<size_t>(n));
        in.fill(r);
        Tensor out(type, own);
        std::string what =
            absl::StrCat("reduce_scatter_v ", std::string(to_string(op)), " ", where);
        if (absl::Status s = reduce_scatter_v(c, type, op, in.data(), out.data(), counts);
            !s.ok()) {
          return absl::Status(s.code(), absl::StrCat(what, ": ", s.message()));
        }
        if (absl::Status s = check(
                what, out, [&](size_t i) { return closed_form(op, n, i); },
                offsets[static_cast<size_t>(r)]);
            !s.ok()) {
          return s;
        }
      }
      {
        const size_t width = element_size(type);
        Tensor mine(type, own);
        mine.fill(r);
        Tensor all(type, count * static_cast<size_t>(n));
        std::vector<size_t> bytes;
        for (size_t k : counts)
          bytes.push_back(k * width);
        std::string what = absl::StrCat("allgather_v ", where);
        if (absl::Status s = allgather_v(c, mine.data(), all.data(), bytes); !s.ok()) {
          return absl::Status(s.code(), absl::StrCat(what, ": ", s.message()));
        }
        for (int b = 0; b < n; ++b) {
          Tensor block(type, counts[static_cast<size_t>(b)]);
          if (!block.bytes.empty()) {
            std::memcpy(block.data(), &all.bytes[offsets[static_cast<size_t>(b)] * width],
                        block.bytes.size());
          }
          if (absl::Status s = check(absl::StrCat(what, ", block ", b), block,
                                     [&](size_t i) { return contribution(b, i); });
              !s.ok()) {
            return s;
          }
        }
      }
      {
        const int root = static_cast<int>(count % static_cast<size_t>(n));
        Tensor t(type, count);
        t.fill(r);
        std::string what = absl::StrCat("broadcast from ", root, " ", where);
        if (absl::Status s = broadcast(c, t.data(), t.bytes.size(), root); !s.ok()) {
          return absl::Status(s.code(), absl::StrCat(what, ": ", s.message()));
        }
        if (absl::Status s = check(what, t, [&](size_t i) { return contribution(root, i); });
            !s.ok()) {
          return s;
        }
      }
      if (absl::Status s = barrier(c); !s.ok()) {
        return absl::Status(s.code(), absl::StrCat("barrier ", where, ": ", s.message()));
      }
    }
  }
  return absl::OkStatus();
}

class EveryOperationTest : public GroupShapeTest {};

TEST_P(EveryOperationTest, MatchesClosedForms) {
  const int n = ranks();
  // Two pretend hosts, so that the hierarchical algorithm has both levels.
  auto results = run_group(
      transport(), n, [&](Communicator& c) { return every_operation(c, {count()}); }, 2);
  for (int r = 0; r < n; ++r)
    ASSERT_TRUE(results[r].ok()) << results[r];
}

// Sizes: none, fewer elements than ranks, and even and odd lengths, which
// the ranks' blocks divide evenly or not.
INSTANTIATE_TEST_SUITE_P(
    Sizes, EveryOperationTest,
    ::testing::Combine(::testing::ValuesIn(kTransports), ::testing::Range(1, 9),
                       ::testing::Values<size_t>(0, 1, 4, 100, 1000, 1003, 10000)),
    shape_name);

// One mebibyte plus three elements: an odd length, in blocks of up to
// several ring segments. Too slow under ThreadSanitizer: the names hold
// "OneMebibyte" for scripts/test.sh to leave them out there.
INSTANTIATE_TEST_SUITE_P(OneMebibytePlusThree, EveryOperationTest,
                         ::testing::Combine(::testing::ValuesIn(kTransports),
                                            ::testing::Values(2, 3, 4),
                                            ::testing::Values((size_t{1} << 20) + 3)),
                         shape_name);

// Every rank on this host: kAuto takes shared memory for allreduce,
// reduce-scatter, allgather and barrier, and the other algorithms run
// between its operations.
class SharedMemoryTest : public GroupShapeTest {};

TEST_P(SharedMemoryTest, MatchesClosedForms) {
  const int n = ranks();
  auto results = run_group(transport(), n, [&](Communicator& c) -> absl::Status {
    if (n > 1 && c.shared_segment() == nullptr) {
      return absl::InternalError("ranks on one host have no shared segment");
    }
    if (n > 1 && choose_algorithm(c, 8) != Algorithm::kSharedMemory) {
      return absl::InternalError("kAuto does not take shared memory");
    }
    return every_operation(c, {count()});
  });
  for (int r = 0; r < n; ++r)
    ASSERT_TRUE(results[r].ok()) << results[r];
}

// Sizes: none, fewer elements than ranks, one exchange of the whole vector,
// and several pieces of a segment buffer (1 MiB) in every dtype.
INSTANTIATE_TEST_SUITE_P(Sizes, SharedMemoryTest,
                         ::testing::Combine(::testing::ValuesIn(kTransports),
                                            ::testing::Values(1, 2, 3, 5, 8),
                                            ::testing::Values<size_t>(0, 3, 1003, 20000)),
                         shape_name);
INSTANTIATE_TEST_SUITE_P(OneMebibytePlusThree, SharedMemoryTest,
                         ::testing::Combine(::testing::Values("inproc"), ::testing::Values(2, 3),
                                            ::testing::Values((size_t{1} << 20) + 3)),
                         shape_name);

class CollectivesTest : public TransportTest {};

TEST_P(CollectivesTest, BitwiseIdenticalAcrossRunsAndRanksForEachAlgorithm) {
  const int n = 5;
  const size_t count = 200000;  // several ring segments per block
  for (Algorithm algorithm : {Algorithm::kRing, Algorithm::kHalvingDoubling,
                              Algorithm::kHierarchical, Algorithm::kSharedMemory}) {
    for (DType type : {DType::kFloat32, DType::kBFloat16}) {
      auto reduce_random = [&] {
        std::vector<Tensor> out(n, Tensor(type, 0));
        auto results = run_group(
            GetParam(), n,
            [&](Communicator& c) -> absl::Status {
              std::mt19937 gen(1234 + c.rank());
              std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
              Tensor t(type, count);
              for (size_t i = 0; i < count; ++i)
                t.set(i, dist(gen));
              absl::Status s = allreduce(c, type, ReduceOp::kSum, t.data(), count, algorithm);
              out[c.rank()] = std::move(t);
              return s;
            },
            // Shared memory needs every rank on one host; the others run
            // on two pretend hosts, so that hierarchical has both levels.
            algorithm == Algorithm::kSharedMemory ? 0 : 2);
        for (auto& s : results)
          EXPECT_TRUE(s.ok()) << s;
        return out;
      };
      auto first = reduce_random();
      auto second = reduce_random();
      for (int r = 0; r < n; ++r) {
        EXPECT_TRUE(first[r].bytes == first[0].bytes)
            << to_string(algorithm) << " " << to_string(type) << ": rank " << r
            << " differs from rank 0";
        EXPECT_TRUE(first[r].bytes == second[r].bytes)
            << to_string(algorithm) << " " << to_string(type) << ": rank " << r
            << " differs between runs";
      }
    }
  }
}

TEST_P(CollectivesTest, AbortFailsEveryMemberWithAborted) {
  const int n = 4;
  std::atomic<int> finished{0};
  absl::Time start = absl::Now();
  auto results = run_group(GetParam(), n, [&](Communicator& c) -> absl::Status {
    std::vector<float> data(100000, 1.0f);
    if (c.rank() == 2) {
      // Rank 2 aborts the group instead of taking part, and stays up (an
      // aborting member is alive: a dead one is a lost member) until the
      // others have returned.
      c.abort(absl::AbortedError("rank 2 gives up"));
      absl::Status s = allreduce(c, DType::kFloat32, ReduceOp::kSum, data.data(), data.size());
      absl::Time deadline = absl::Now() + absl::Seconds(20);
      while (finished.load() < n - 1 && absl::Now() < deadline)
        std::this_thread::yield();
      return s;
    }
    absl::Status s = allreduce(c, DType::kFloat32, ReduceOp::kSum, data.data(), data.size());
    finished.fetch_add(1);
    return s;
  });
  for (int r = 0; r < n; ++r)
    EXPECT_TRUE(absl::IsAborted(results[r])) << "rank " << r << ": " << results[r];
  EXPECT_LT(absl::Now() - start, absl::Seconds(20)) << "aborting must not wait for the timeout";
}

TEST_P(CollectivesTest, BadArgumentsAreRefused) {
  auto results = run_group(GetParam(), 2, [&](Communicator& c) -> absl::Status {
    float x = 1;
    absl::Status s = broadcast(c, &x, sizeof(x), 2);
    if (!absl::IsInvalidArgument(s))
      return absl::InternalError(absl::StrCat("root 2: ", s.ToString()));
    float out = 0;
    s = reduce_scatter(c, DType::kFloat32, ReduceOp::kSum, &x, &out, 0,
                       Algorithm::kHalvingDoubling);
    if (!absl::IsInvalidArgument(s))
      return absl::InternalError(absl::StrCat("algorithm: ", s.ToString()));
    const size_t three[] = {1, 1, 1};
    s = reduce_scatter_v(c, DType::kFloat32, ReduceOp::kSum, &x, &out, three);
    if (!absl::IsInvalidArgument(s))
      return absl::InternalError(absl::StrCat("reduce_scatter_v counts: ", s.ToString()));
    s = allgather_v(c, &x, &out, three);
    if (!absl::IsInvalidArgument(s))
      return absl::InternalError(absl::StrCat("allgather_v sizes: ", s.ToString()));
    // The group still works.
    return allreduce(c, DType::kFloat32, ReduceOp::kSum, &x, 1);
  });
  for (auto& s : results)
    EXPECT_TRUE(s.ok()) << s;
}

// A rank that never comes: the others' shared-memory waits end at the
// group's timeout, and the group is aborted, so that nobody waits longer.
TEST_P(CollectivesTest, SharedMemoryWaitsEndAtTheTimeout) {
  const int n = 3;
  const absl::Time start = absl::Now();
  auto results = run_group(
      GetParam(), n,
      [&](Communicator& c) -> absl::Status {
        if (c.rank() == 1) {
          // Waits for a message that never comes until the others' abort
          // reaches it (over the transport, after they give up); each
          // receive ends at the group's timeout, or at the abort.
          const absl::Time deadline = absl::Now() + absl::Seconds(20);
          absl::Status s = absl::DeadlineExceededError("not waited");
          while (absl::IsDeadlineExceeded(s) && absl::Now() < deadline)
            s = c.recv(0, uint64_t{1} << 63).status();
          return s;
        }
        std::vector<float> data(1000, 1.0f);
        return allreduce(c, DType::kFloat32, ReduceOp::kSum, data.data(), data.size());
      },
      0, true, absl::Seconds(3));
  // Rank 0 or 2 runs out of time first and aborts the group; the other may
  // learn of the abort before its own time runs out.
  for (int r : {0, 2}) {
    EXPECT_TRUE(absl::IsDeadlineExceeded(results[r]) || absl::IsAborted(results[r]))
        << "rank " << r << ": " << results[r];
  }
  EXPECT_TRUE(absl::IsDeadlineExceeded(results[0]) || absl::IsDeadlineExceeded(results[2]));
  EXPECT_TRUE(absl::IsAborted(results[1])) << results[1];
  EXPECT_LT(absl::Now() - start, absl::Seconds(15));
}

// Without shared memory (CommunicatorOptions::shared_memory false) there is
// no segment, kAuto takes the transport, and asking for it is refused.
TEST_P(CollectivesTest, SharedMemoryCanBeTurnedOff) {
  auto results = run_group(
      GetParam(), 2,
      [&](Communicator& c) -> absl::Status {
        if (c.shared_segment() != nullptr) return absl::InternalError("a segment was made");
        if (choose_algorithm(c, 8) == Algorithm::kSharedMemory) {
          return absl::InternalError("kAuto took shared memory");
        }
        float x = 1;
        absl::Status s =
            allreduce(c, DType::kFloat32, ReduceOp::kSum, &x, 1, Algorithm::kSharedMemory);
        if (!absl::IsFailedPrecondition(s)) {
          return absl::InternalError(absl::StrCat("shared memory asked for: ", s.ToString()));
        }
        if (absl::Status a = allreduce(c, DType::kFloat32, ReduceOp::kSum, &x, 1); !a.ok()) {
          return a;
        }
        return x == 2 ? absl::OkStatus() : absl::InternalError(absl::StrCat("sum ", x));
      },
      0, false);
  for (auto& s : results)
    EXPECT_TRUE(s.ok()) << s;
}

TEST(CollectivesAlgorithmTest, NamesRoundTripAndUnknownNamesAreRefused) {
  for (Algorithm a : {Algorithm::kAuto, Algorithm::kRing, Algorithm::kHalvingDoubling,
                      Algorithm::kHierarchical, Algorithm::kSharedMemory}) {
    auto parsed = parse_algorithm(to_string(a));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, a);
  }
  EXPECT_TRUE(absl::IsInvalidArgument(parse_algorithm("tree").status()));
}

INSTANTIATE_TEST_SUITE_P(Transports, CollectivesTest, ::testing::ValuesIn(kTransports),
                         transport_name);

}  // namespace
}  // namespace troupe::transport::testing
