// The NCCL backend (transport/collectives/nccl) on real CUDA devices.
//
// Without a device the tests that need one skip themselves, so that CI
// (no GPU) passes; TROUPE_REQUIRE_GPU=1 turns that into a failure, for the
// GPU check (scripts/gpu_check.sh). NCCL refuses two ranks of a communicator
// on one device, so with one device the tests form 1-rank communicators:
// every reduction is then the identity, and every op and dtype is checked
// bit for bit against its input. With two or more devices the multi-rank
// tests run a thread per device and check closed forms.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <future>
#include <limits>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "transport/collectives/nccl/nccl_communicator.h"

namespace troupe::transport::testing {
namespace {

void check_cuda(cudaError_t code, const char* what) {
  if (code != cudaSuccess) {
    throw std::runtime_error(
        absl::StrCat(what, ": ", cudaGetErrorName(code), " (", cudaGetErrorString(code), ")"));
  }
}

// Why a test that needs `n` devices cannot run here; empty when it can.
std::string missing_devices(int n) {
  int count = 0;
  cudaError_t code = cudaGetDeviceCount(&count);
  if (code != cudaSuccess) count = 0;
  if (count >= n) return "";
  std::string why = absl::StrCat("needs ", n, " CUDA device(s); found ", count);
  if (code != cudaSuccess) {
    absl::StrAppend(&why, " (cudaGetDeviceCount: ", cudaGetErrorName(code), ": ",
                    cudaGetErrorString(code), ")");
  }
  const char* require = std::getenv("TROUPE_REQUIRE_GPU");
  if (n == 1 && require != nullptr && std::string(require) == "1") {
    ADD_FAILURE() << "TROUPE_REQUIRE_GPU=1 but this test " << why;
  }
  return why;
}

// `count` elements of `type` in device memory, written and read as the bits
// of the host's conversions (dtype.h).
class DeviceTensor {
 public:
  DeviceTensor(DType type, size_t count) : type_(type), count_(count) {
    check_cuda(cudaMalloc(&data_, std::max<size_t>(bytes(), 1)), "cudaMalloc");
  }
  ~DeviceTensor() { (void)cudaFree(data_); }
  DeviceTensor(const DeviceTensor&) = delete;
  DeviceTensor& operator=(const DeviceTensor&) = delete;

  void* data() { return data_; }
  size_t bytes() const { return count_ * element_size(type_); }

  // Element i becomes value(i), rounded to the type.
  void fill(const std::function<float(size_t)>& value) {
    std::vector<uint32_t> host(count_);
    for (size_t i = 0; i < count_; ++i)
      host[i] = bits_of(type_, value(i));
    upload_bits(host);
  }
  void upload_bits(const std::vector<uint32_t>& bits) {
    std::vector<std::byte> host(bytes());
    const size_t size = element_size(type_);
    for (size_t i = 0; i < count_; ++i)
      std::memcpy(&host[i * size], &bits[i], size);  // little-endian: the low bytes
    check_cuda(cudaMemcpy(data_, host.data(), bytes(), cudaMemcpyHostToDevice), "upload");
    // From pageable memory cudaMemcpy may return before the copy lands, and
    // the communicator's stream does not wait for the legacy stream's work.
    check_cuda(cudaStreamSynchronize(cudaStreamLegacy), "upload: synchronize");
  }
  std::vector<uint32_t> bits() const {
    std::vector<std::byte> host(bytes());
    check_cuda(cudaMemcpy(host.data(), data_, bytes(), cudaMemcpyDeviceToHost), "download");
    std::vector<uint32_t> out(count_, 0);
    const size_t size = element_size(type_);
    for (size_t i = 0; i < count_; ++i)
      std::memcpy(&out[i], &host[i * size], size);
    return out;
  }

  static uint32_t bits_of(DType type, float v) {
    switch (type) {
      case DType::kFloat32: {
        uint32_t b;
        std::memcpy(&b, &v, 4);
        return b;
      }
      case DType::kFloat16:
        return float_to_half(v);
      case DType::kBFloat16:
        return float_to_bf16(v);
    }
    return 0;
  }

 private:
  DType type_;
  size_t count_;
  void* data_ = nullptr;
};

// Values that must come through a 1-rank collective bit for bit: signed
// zeros, infinities, the largest fp16 and bf16 values, the smallest fp16
// subnormal and normal, then a pattern. (No NaN: NCCL's max and min need not
// keep payloads.)
float edge_value(size_t i) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  static const float kEdges[] = {0.0f,     -0.0f,     1.0f,          -2.5f,  65504.0f, -65504.0f,
                                 0x1p-24f, -0x1p-14f, 3.3895314e38f, 1e-30f, kInf,     -kInf};
  constexpr size_t kCount = sizeof(kEdges) / sizeof(kEdges[0]);
  if (i < kCount) return kEdges[i];
  return static_cast<float>(static_cast<int>(i % 13) - 6) * 0.375f;
}

// Rank r contributes (r + 1) * (i % 7 + 1) at element i: sums of up to 8
// ranks stay below 256, exact in every dtype.
float contribution(int rank, size_t i) {
  return static_cast<float>((rank + 1) * static_cast<int>(i % 7 + 1));
}

NcclOptions one_rank(const std::string& group, uint64_t generation = 0) {
  NcclOptions options;
  options.group = group;
  options.generation = generation;
  options.timeout = absl::Seconds(60);
  return options;
}

constexpr absl::Duration kWait = absl::Seconds(60);

// Runs `body` on a thread of its own and waits up to `limit` for it. A body
// stuck inside NCCL past that is left behind (detached, holding what it
// captured) and nullopt returned, so that a hang fails the test instead of
// the whole binary.
template <typename T>
std::optional<T> run_bounded(absl::Duration limit, std::function<T()> body) {
  auto promise = std::make_shared<std::promise<T>>();
  std::future<T> future = promise->get_future();
  std::thread([promise, body = std::move(body)] { promise->set_value(body()); }).detach();
  if (future.wait_for(absl::ToChronoSeconds(limit)) != std::future_status::ready) {
    return std::nullopt;
  }
  return future.get();
}

TEST(NcclOptionsTest, RejectsRanksOutsideTheGroup) {
  InMemoryStore store;
  NcclOptions options;
  options.rank = 2;
  options.size = 2;
  EXPECT_EQ(NcclCommunicator::create(store, options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.rank = 0;
  options.size = 0;
  EXPECT_EQ(NcclCommunicator::create(store, options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.size = 1;
  options.device = -1;
  EXPECT_EQ(NcclCommunicator::create(store, options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(NcclOptionsTest, ReportsTheLibraryVersion) {
  std::string version = nccl_version();
  std::printf("NCCL library version: %s\n", version.c_str());
  EXPECT_EQ(version.rfind("2.", 0), 0u) << version;
}

// A device that is not there fails create with CUDA's reason, and no id is
// published for other ranks to wait on.
TEST(NcclOptionsTest, MissingDeviceIsAnError) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
  InMemoryStore store;
  NcclOptions options = one_rank("missing-device");
  options.device = count;
  absl::StatusOr<std::unique_ptr<NcclCommunicator>> comm = NcclCommunicator::create(store, options);
  ASSERT_FALSE(comm.ok());
  EXPECT_EQ(comm.status().code(),
            count == 0 ? absl::StatusCode::kFailedPrecondition : absl::StatusCode::kInvalidArgument)
      << comm.status();
  EXPECT_NE(comm.status().message().find("missing-device"), std::string::npos) << comm.status();
  EXPECT_FALSE(store.wait_get("missing-device/0/nccl-id", absl::ZeroDuration()).ok());
}

TEST(NcclOneRankTest, PublishesTheUniqueIdUnderTheGeneration) {
  if (std::string why = missing_devices(1); !why.empty()) GTEST_SKIP() << why;
  InMemoryStore store;
  auto comm = NcclCommunicator::create(store, one_rank("ids", 7));
  ASSERT_TRUE(comm.ok()) << comm.status();
  absl::StatusOr<std::string> id = store.wait_get("ids/7/nccl-id", absl::ZeroDuration());
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(id->size(), 128u);
  EXPECT_EQ((*comm)->rank(), 0);
  EXPECT_EQ((*comm)->size(), 1);
  EXPECT_EQ((*comm)->generation(), 7u);
}

class NcclOneRankOpsTest : public ::testing::TestWithParam<std::tuple<DType, size_t>> {};

// With one rank every collective is the identity (avg divides by 1): each
// op must hand back its input's bits, out of place and in place, on the
// communicator's stream and on the caller's.
TEST_P(NcclOneRankOpsTest, EveryOpIsTheIdentity) {
  if (std::string why = missing_devices(1); !why.empty()) GTEST_SKIP() << why;
  const auto [type, count] = GetParam();
  InMemoryStore store;
  auto comm = NcclCommunicator::create(store, one_rank("ops"));
  ASSERT_TRUE(comm.ok()) << comm.status();
  NcclCommunicator& c = **comm;
  cudaStream_t own = nullptr;
  check_cuda(cudaStreamCreate(&own), "cudaStreamCreate");

  DeviceTensor input(type, count);
  input.fill(edge_value);
  const std::vector<uint32_t> expected = input.bits();
  DeviceTensor output(type, count);
  auto check = [&](const std::string& what, NcclWork work, DeviceTensor& got) {
    absl::Status status = work.wait(kWait);
    ASSERT_TRUE(status.ok()) << what << ": " << status;
    EXPECT_TRUE(work.done()) << what;
    EXPECT_EQ(got.bits(), expected) << what;
  };
  const std::string where = absl::StrCat(std::string(to_string(type)), " x ", count);
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin}) {
    const std::string name = absl::StrCat("allreduce ", std::string(to_string(op)), " ", where);
    output.fill([](size_t) { return 42.0f; });
    check(name, c.allreduce(input.data(), output.data(), count, type, op), output);
    check(name + " in place, caller's stream",
          c.allreduce(output.data(), output.data(), count, type, op, own), output);
    output.fill([](size_t) { return 42.0f; });
    check("reduce_scatter " + name, c.reduce_scatter(input.data(), output.data(), count, type, op),
          output);
  }
  output.fill([](size_t) { return 42.0f; });
  check("allgather " + where, c.allgather(input.data(), output.data(), count, type), output);
  output.fill([](size_t) { return 42.0f; });
  check("broadcast " + where, c.broadcast(input.data(), output.data(), count, type, 0), output);
  output.fill([](size_t) { return 42.0f; });
  check("send_recv to self " + where,
        c.send_recv(input.data(), 0, output.data(), 0, count, type, own), output);
  absl::Status barrier = c.barrier().wait(kWait);
  EXPECT_TRUE(barrier.ok()) << barrier;
  check_cuda(cudaStreamDestroy(own), "cudaStreamDestroy");
}

INSTANTIATE_TEST_SUITE_P(
    DTypesAndSizes, NcclOneRankOpsTest,
    ::testing::Combine(::testing::Values(DType::kFloat32, DType::kFloat16, DType::kBFloat16),
                       ::testing::Values(size_t{0}, size_t{1}, size_t{100}, size_t{1} << 20)),
    [](const auto& test) {
      return absl::StrCat(std::string(to_string(std::get<0>(test.param))), "_",
                          std::get<1>(test.param));
    });

TEST(NcclOneRankTest, ArgumentsThatCannotBeRightFailTheOperationOnly) {
  if (std::string why = missing_devices(1); !why.empty()) GTEST_SKIP() << why;
  InMemoryStore store;
  auto comm = NcclCommunicator::create(store, one_rank("arguments"));
  ASSERT_TRUE(comm.ok()) << comm.status();
  NcclCommunicator& c = **comm;
  DeviceTensor data(DType::kFloat32, 4);
  NcclWork to_self = c.send(data.data(), 4, DType::kFloat32, 0);
  EXPECT_TRUE(to_self.done());
  EXPECT_EQ(to_self.wait(kWait).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c.recv(data.data(), 4, DType::kFloat32, 0).wait(kWait).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c.broadcast(data.data(), data.data(), 4, DType::kFloat32, 1).wait(kWait).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c.send_recv(data.data(), -1, data.data(), 0, 4, DType::kFloat32).wait(kWait).code(),
            absl::StatusCode::kInvalidArgument);
  absl::Status after = c.barrier().wait(kWait);
  EXPECT_TRUE(after.ok()) << after;
}

TEST(NcclOneRankTest, WorkOutlivesItsCommunicator) {
  if (std::string why = missing_devices(1); !why.empty()) GTEST_SKIP() << why;
  InMemoryStore store;
  auto comm = NcclCommunicator::create(store, one_rank("outlives"));
  ASSERT_TRUE(comm.ok()) << comm.status();
  DeviceTensor data(DType::kFloat32, 1 << 20);
  data.fill(edge_value);
  NcclWork work =
      (*comm)->allreduce(data.data(), data.data(), 1 << 20, DType::kFloat32, ReduceOp::kSum);
  comm->reset();  // flushes the operation, then destroys the communicator
  absl::Status status = work.wait(kWait);
  EXPECT_TRUE(status.ok()) << status;
}

// Every wait after abort() returns Aborted, whether its operation had
// completed or not, and so does every later operation.
TEST(NcclOneRankTest, AbortFailsEveryWait) {
  if (std::string why = missing_devices(1); !why.empty()) GTEST_SKIP() << why;
  InMemoryStore store;
  auto comm = NcclCommunicator::create(store, one_rank("abort"));
  ASSERT_TRUE(comm.ok()) << comm.status();
  NcclCommunicator& c = **comm;
  constexpr size_t kCount = size_t{16} << 20;
  DeviceTensor input(DType::kFloat32, kCount);
  DeviceTensor output(DType::kFloat32, kCount);
  std::vector<NcclWork> works;
  for (int i = 0; i < 4; ++i) {
    works.push_back(
        c.allreduce(input.data(), output.data(), kCount, DType::kFloat32, ReduceOp::kSum));
  }
  c.abort(absl::AbortedError("test: abort"));
  for (NcclWork& work : works) {
    EXPECT_TRUE(work.done());
    absl::Status status = work.wait(kWait);
    EXPECT_EQ(status.code(), absl::StatusCode::kAborted) << status;
    EXPECT_NE(status.message().find("test: abort"), std::string::npos) << status;
  }
  EXPECT_EQ(c.barrier().wait(kWait).code(), absl::StatusCode::kAborted);
}

// An operation that cannot complete in time (its stream is held by a host
// function) times out with DeadlineExceeded, which aborts the communicator.
TEST(NcclOneRankTest, WaitTimesOutAndAborts) {
  if (std::string why = missing_devices(1); !why.empty()) GTEST_SKIP() << why;
  InMemoryStore store;
  auto comm = NcclCommunicator::create(store, one_rank("wait-timeout"));
  ASSERT_TRUE(comm.ok()) << comm.status();
  NcclCommunicator& c = **comm;
  // Sleeps for a fixed time rather than waiting for the test, so that an
  // abort that synchronises with the stream cannot deadlock.
  check_cuda(
      cudaLaunchHostFunc(
          c.stream(), [](void*) { std::this_thread::sleep_for(std::chrono::seconds(2)); }, nullptr),
      "cudaLaunchHostFunc");
  DeviceTensor data(DType::kFloat32, 1024);
  NcclWork work = c.allreduce(data.data(), data.data(), 1024, DType::kFloat32, ReduceOp::kSum);
  EXPECT_FALSE(work.done());
  const absl::Time start = absl::Now();
  absl::Status status = work.wait(absl::Milliseconds(200));
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
  EXPECT_EQ(work.wait(kWait).code(), absl::StatusCode::kAborted);
  EXPECT_EQ(c.barrier().wait(kWait).code(), absl::StatusCode::kAborted);
}

TEST(NcclOneRankTest, NewGenerationWorksAfterAbort) {
  if (std::string why = missing_devices(1); !why.empty()) GTEST_SKIP() << why;
  InMemoryStore store;
  auto first = NcclCommunicator::create(store, one_rank("regroup", 0));
  ASSERT_TRUE(first.ok()) << first.status();
  (*first)->abort(absl::UnavailableError("test: a member was lost"));
  EXPECT_EQ((*first)->barrier().wait(kWait).code(), absl::StatusCode::kAborted);

  auto second = NcclCommunicator::create(store, one_rank("regroup", 1));
  ASSERT_TRUE(second.ok()) << second.status();
  DeviceTensor data(DType::kBFloat16, 1000);
  data.fill([](size_t i) { return contribution(0, i); });
  const std::vector<uint32_t> expected = data.bits();
  absl::Status status =
      (*second)
          ->allreduce(data.data(), data.data(), 1000, DType::kBFloat16, ReduceOp::kSum)
          .wait(kWait);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(data.bits(), expected);
  EXPECT_NE(store.wait_get("regroup/0/nccl-id", absl::ZeroDuration()).value_or(""),
            store.wait_get("regroup/1/nccl-id", absl::ZeroDuration()).value_or(""));
}

// Rank 0 of 2 alone: NCCL's non-blocking initialization waits for rank 1
// until the timeout, then is aborted.
TEST(NcclRendezvousTest, RankZeroTimesOutWhenAPeerNeverJoins) {
  if (std::string why = missing_devices(1); !why.empty()) GTEST_SKIP() << why;
  auto store = std::make_shared<InMemoryStore>();
  NcclOptions options = one_rank("lonely");
  options.size = 2;
  options.timeout = absl::Seconds(3);
  const absl::Time start = absl::Now();
  std::optional<absl::Status> status = run_bounded<absl::Status>(
      absl::Seconds(60),
      [store, options] { return NcclCommunicator::create(*store, options).status(); });
  ASSERT_TRUE(status.has_value()) << "create did not return within 60 s of a 3 s timeout";
  EXPECT_EQ(status->code(), absl::StatusCode::kDeadlineExceeded) << *status;
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
  EXPECT_TRUE(store->wait_get("lonely/0/nccl-id", absl::ZeroDuration()).ok());
}

TEST(NcclRendezvousTest, OtherRanksTimeOutWithoutRankZero) {
  if (std::string why = missing_devices(1); !why.empty()) GTEST_SKIP() << why;
  InMemoryStore store;
  NcclOptions options = one_rank("headless");
  options.rank = 1;
  options.size = 2;
  options.timeout = absl::Milliseconds(300);
  absl::Status status = NcclCommunicator::create(store, options).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_NE(status.message().find("headless/0/nccl-id"), std::string::npos) << status;
}

// Two ranks on one device: NCCL refuses them (then both creates fail with
// its reason, within the timeout), or - where a NCCL release allows it -
// they form a working group. A suite of its own: a failed NCCL
// initialization may leave NCCL threads behind, so scripts/gpu_check.sh runs
// it in a process of its own, after the others.
TEST(NcclSharedDeviceTest, TwoRanksFailCleanlyOrWork) {
  if (std::string why = missing_devices(1); !why.empty()) GTEST_SKIP() << why;
  auto store = std::make_shared<InMemoryStore>();
  auto results = std::make_shared<std::vector<std::string>>(2);
  std::optional<int> ok = run_bounded<int>(absl::Seconds(90), [store, results] {
    std::vector<std::thread> threads;
    std::vector<int> oks(2, 0);
    for (int r = 0; r < 2; ++r) {
      threads.emplace_back([&, r] {
        NcclOptions options = one_rank("shared-device");
        options.rank = r;
        options.size = 2;
        options.timeout = absl::Seconds(20);
        auto comm = NcclCommunicator::create(*store, options);
        if (!comm.ok()) {
          (*results)[r] = comm.status().ToString();
          return;
        }
        DeviceTensor data(DType::kFloat32, 100);
        data.fill([r](size_t i) { return contribution(r, i); });
        absl::Status status =
            (*comm)
                ->allreduce(data.data(), data.data(), 100, DType::kFloat32, ReduceOp::kSum)
                .wait(kWait);
        std::vector<uint32_t> bits = data.bits();
        bool right = status.ok();
        for (size_t i = 0; i < bits.size() && right; ++i)
          right = bits[i] == DeviceTensor::bits_of(DType::kFloat32, 3.0f * (i % 7 + 1));
        (*results)[r] = right ? "OK" : absl::StrCat("wrong sum: ", status.ToString());
        oks[r] = right ? 1 : 0;
      });
    }
    for (std::thread& t : threads)
      t.join();
    return oks[0] + oks[1];
  });
  ASSERT_TRUE(ok.has_value()) << "two ranks on one device hung for 90 s";
  std::printf("two ranks on one device: rank 0: %s; rank 1: %s\n", (*results)[0].c_str(),
              (*results)[1].c_str());
  if (*ok == 2) return;  // this NCCL allows it, and the sum is right
  EXPECT_EQ(*ok, 0) << "one rank worked and the other did not";
  for (const std::string& result : *results)
    EXPECT_NE(result.find("nccl group 'shared-device'"), std::string::npos) << result;
}

constexpr size_t kPerRank = 1000;  // elements per rank in the multi-rank test

// A thread per device, ranks 0..n-1 on devices 0..n-1: closed forms.
TEST(NcclMultiRankTest, CollectivesMatchClosedForms) {
  if (std::string why = missing_devices(2); !why.empty()) GTEST_SKIP() << why;
  int devices = 0;
  check_cuda(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
  const int n = std::min(devices, 8);
  InMemoryStore store;
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      check_cuda(cudaSetDevice(r), "cudaSetDevice");
      NcclOptions options = one_rank("multi");
      options.rank = r;
      options.size = n;
      options.device = r;
      auto comm = NcclCommunicator::create(store, options);
      ASSERT_TRUE(comm.ok()) << comm.status();
      NcclCommunicator& c = **comm;
      const std::string where = absl::StrCat("rank ", r, " of ", n);
      auto expect_bits = [&](const std::string& what, DType type, DeviceTensor& got,
                             const std::function<float(size_t)>& want) {
        std::vector<uint32_t> bits = got.bits();
        for (size_t i = 0; i < bits.size(); ++i) {
          ASSERT_EQ(bits[i], DeviceTensor::bits_of(type, want(i)))
              << what << ", " << where << ", element " << i;
        }
      };
      for (DType type : {DType::kFloat32, DType::kBFloat16}) {
        DeviceTensor data(type, kPerRank);
        data.fill([r](size_t i) { return contribution(r, i); });
        ASSERT_TRUE(
            c.allreduce(data.data(), data.data(), kPerRank, type, ReduceOp::kSum).wait(kWait).ok());
        expect_bits("allreduce sum", type, data,
                    [n](size_t i) { return static_cast<float>((i % 7 + 1) * n * (n + 1) / 2); });
      }
      DeviceTensor data(DType::kFloat32, kPerRank);
      data.fill([r](size_t i) { return contribution(r, i); });
      ASSERT_TRUE(c.allreduce(data.data(), data.data(), kPerRank, DType::kFloat32, ReduceOp::kMax)
                      .wait(kWait)
                      .ok());
      expect_bits("allreduce max", DType::kFloat32, data,
                  [n](size_t i) { return static_cast<float>((i % 7 + 1) * n); });

      DeviceTensor blocks(DType::kFloat32, kPerRank * n);
      blocks.fill([r](size_t i) { return contribution(r, i); });
      DeviceTensor mine(DType::kFloat32, kPerRank);
      ASSERT_TRUE(
          c.reduce_scatter(blocks.data(), mine.data(), kPerRank, DType::kFloat32, ReduceOp::kMin)
              .wait(kWait)
              .ok());
      expect_bits("reduce_scatter min", DType::kFloat32, mine,
                  [r](size_t i) { return contribution(0, static_cast<size_t>(r) * kPerRank + i); });

      mine.fill([r](size_t i) { return contribution(r, i); });
      ASSERT_TRUE(
          c.allgather(mine.data(), blocks.data(), kPerRank, DType::kFloat32).wait(kWait).ok());
      expect_bits("allgather", DType::kFloat32, blocks, [](size_t i) {
        return contribution(static_cast<int>(i / kPerRank), i % kPerRank);
      });

      mine.fill([r](size_t i) { return contribution(r, i); });
      ASSERT_TRUE(
          c.broadcast(mine.data(), mine.data(), kPerRank, DType::kFloat32, n - 1).wait(kWait).ok());
      expect_bits("broadcast", DType::kFloat32, mine,
                  [n](size_t i) { return contribution(n - 1, i); });

      // A ring shift: each rank sends to the right and receives from the left.
      mine.fill([r](size_t i) { return contribution(r, i); });
      ASSERT_TRUE(c.send_recv(mine.data(), (r + 1) % n, data.data(), (r + n - 1) % n, kPerRank,
                              DType::kFloat32)
                      .wait(kWait)
                      .ok());
      expect_bits("send_recv", DType::kFloat32, data,
                  [r, n](size_t i) { return contribution((r + n - 1) % n, i); });
      if (r == 0) {
        ASSERT_TRUE(c.send(mine.data(), kPerRank, DType::kFloat32, 1).wait(kWait).ok());
      } else if (r == 1) {
        ASSERT_TRUE(c.recv(data.data(), kPerRank, DType::kFloat32, 0).wait(kWait).ok());
        expect_bits("send/recv", DType::kFloat32, data,
                    [](size_t i) { return contribution(0, i); });
      }
      ASSERT_TRUE(c.barrier().wait(kWait).ok());
    });
  }
  for (std::thread& t : threads)
    t.join();
}

// Not a check: the time of a 1-rank 256 MiB fp32 allreduce (out of place,
// so a device-to-device copy), for the GPU check's log.
TEST(NcclTimingTest, OneRankAllreduce256MiB) {
  if (std::string why = missing_devices(1); !why.empty()) GTEST_SKIP() << why;
  InMemoryStore store;
  auto comm = NcclCommunicator::create(store, one_rank("timing"));
  ASSERT_TRUE(comm.ok()) << comm.status();
  constexpr size_t kCount = size_t{64} << 20;  // 256 MiB of fp32
  DeviceTensor input(DType::kFloat32, kCount);
  DeviceTensor output(DType::kFloat32, kCount);
  constexpr int kWarmups = 3;
  constexpr int kIterations = 20;
  absl::Time start;
  for (int i = 0; i < kWarmups + kIterations; ++i) {
    if (i == kWarmups) start = absl::Now();
    absl::Status status =
        (*comm)
            ->allreduce(input.data(), output.data(), kCount, DType::kFloat32, ReduceOp::kSum)
            .wait(kWait);
    ASSERT_TRUE(status.ok()) << status;
  }
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start) / kIterations;
  const double bytes = static_cast<double>(kCount * sizeof(float));
  // busbw = algbw x 2(n-1)/n is 0 for one rank: nothing crosses a link.
  std::printf("nccl allreduce, 1 rank, 256 MiB fp32: %.3f ms, algbw %.1f GB/s (issue + wait)\n",
              seconds * 1e3, bytes / seconds / 1e9);
}

}  // namespace
}  // namespace troupe::transport::testing
