// CollectiveGroup with and without a device, on a real head (LocalCluster),
// the members formed with init() from threads of this driver process. No GPU
// needed: a group given no device must not load NCCL or CUDA; one given a
// device that is not there fails at init, saying why; and with a stand-in
// backend (tests/transport/fake_device_collectives.h) the group routes device
// buffers, meets through the head's KV store, and aborts its device work.
// Each test runs in a process of its own (ctest), so the library checks see
// only what the test itself did.
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/cluster/cluster.h"
#include "core/cluster/collective_group.h"
#include "core/cluster/local_cluster.h"
#include "tests/cluster/cluster_fixture.h"
#include "tests/common/mapped_libraries.h"
#include "tests/transport/fake_device_collectives.h"
#include "transport/collectives/device_collectives.h"

namespace troupe::cluster {
namespace {

using transport::testing::FakeDeviceCollectives;

using troupe::testing::kGpuLibraries;
using troupe::testing::mapped_libraries;

class CollectiveDeviceTest : public testing::LocalClusterTest {
 public:
  CollectiveDeviceTest() : LocalClusterTest(testing::probe_cluster({})) {}

  // Forms group `name` with one member per entry of `devices` (a thread
  // each, in this process) and runs body(group) on each; each rank's status,
  // init's error included.
  std::vector<absl::Status> form(const std::string& name, const std::vector<int>& devices,
                                 transport::DeviceCollectives* backend,
                                 const std::function<absl::Status(CollectiveGroup&)>& body) {
    const int n = static_cast<int>(devices.size());
    std::vector<absl::Status> results(devices.size());
    std::atomic<int> finished{0};
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        auto group = CollectiveGroup::init({.name = name,
                                            .world_size = n,
                                            .rank = r,
                                            .timeout = absl::Seconds(20),
                                            .device = devices[static_cast<size_t>(r)],
                                            .device_backend = backend});
        results[static_cast<size_t>(r)] = group.ok() ? body(**group) : group.status();
        // Leave together: a member that leaves early is a member lost.
        finished.fetch_add(1);
        const absl::Time deadline = absl::Now() + absl::Seconds(30);
        while (finished.load() < n && absl::Now() < deadline)
          absl::SleepFor(absl::Milliseconds(1));
      });
    }
    for (auto& t : threads)
      t.join();
    return results;
  }
};

absl::Status expect(bool ok, const std::string& what) {
  return ok ? absl::OkStatus() : absl::InternalError(what);
}

TEST_F(CollectiveDeviceTest, GroupsWithoutADeviceMapNoGpuLibrary) {
  auto results = form("host-only", {-1, -1}, nullptr, [](CollectiveGroup& g) {
    if (absl::Status s = expect(g.device() == -1 && g.device_path() == DevicePath::kNone, "path");
        !s.ok())
      return s;
    std::vector<float> data(100000, static_cast<float>(g.rank() + 1));
    if (absl::Status s = g.allreduce(DType::kFloat32, ReduceOp::kSum, data.data(), data.size());
        !s.ok())
      return s;
    return expect(data.back() == 3.0f, absl::StrCat("allreduce gave ", data.back()));
  });
  for (const absl::Status& s : results)
    EXPECT_TRUE(s.ok()) << s;
  EXPECT_FALSE(transport::device_collectives_loaded());
  EXPECT_EQ(mapped_libraries(kGpuLibraries), std::vector<std::string>{});

  // The check can see them: asking for a device loads the backend and NCCL
  // (where the build has them), even when there is no such device.
  auto device = form("then-a-device", {64}, nullptr,
                     [](CollectiveGroup&) { return absl::InternalError("formed on a 65th GPU"); });
  EXPECT_TRUE(absl::IsFailedPrecondition(device[0])) << device[0];
  if (!transport::device_collectives_loaded()) {
    GTEST_SKIP() << "this build has no NCCL backend: nothing more to see (" << device[0] << ")";
  }
  EXPECT_FALSE(mapped_libraries({"libtroupe_nccl"}).empty());
  EXPECT_FALSE(mapped_libraries({"libnccl"}).empty());
}

TEST_F(CollectiveDeviceTest, ADeviceThatIsNotThereFailsAtInitSayingWhy) {
  // No machine has a 65th GPU; this one may have none, or no NCCL in the build.
  const absl::Time start = absl::Now();
  auto results =
      form("no-such-device", {64, 64}, nullptr, [](CollectiveGroup&) { return absl::OkStatus(); });
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  for (const absl::Status& s : results) {
    EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "cannot use") &&
                (absl::StrContains(s.message(), "no NCCL support") ||
                 absl::StrContains(s.message(), "cannot load the NCCL backend") ||
                 absl::StrContains(s.message(), "CUDA device")))
        << s;
  }
  std::cerr << "init with device 64: " << results[0] << "\n";
  // The process goes on: groups without a device still form and work.
  auto after = form("host-after", {-1, -1}, nullptr, [](CollectiveGroup& g) {
    std::vector<float> data(10, 1.0f);
    if (absl::Status s = g.allreduce(DType::kFloat32, ReduceOp::kSum, data.data(), data.size());
        !s.ok())
      return s;
    return expect(data[0] == 2.0f, "sum after a failed device group");
  });
  for (const absl::Status& s : after)
    EXPECT_TRUE(s.ok()) << s;
}

TEST_F(CollectiveDeviceTest, DeviceBuffersGoTheWayTheMembersAgreedOn) {
  FakeDeviceCollectives fake(2);
  auto results = form("routed", {0, 1}, &fake, [&](CollectiveGroup& g) {
    if (absl::Status s = expect(g.device_path() == DevicePath::kDevice, "path"); !s.ok()) return s;
    void* data = fake.allocate_with(g.device(), std::vector<float>(1000, g.rank() + 1.0f));
    if (absl::Status s = g.allreduce(DType::kFloat32, ReduceOp::kSum, data, 1000); !s.ok())
      return s;
    if (absl::Status s = expect(fake.read<float>(data, 1000)[999] == 3.0f, "device sum"); !s.ok())
      return s;
    std::vector<float> host(1000, g.rank() + 1.0f);
    if (absl::Status s = g.allreduce(DType::kFloat32, ReduceOp::kSum, host.data(), 1000); !s.ok())
      return s;
    if (absl::Status s = expect(host[999] == 3.0f, "host sum"); !s.ok()) return s;
    // Point to point from device memory.
    void* message = fake.allocate_with(g.device(), std::vector<int32_t>(4, 40 + g.rank()));
    if (g.rank() == 0) return g.send(1, 3, message, 16);
    if (absl::Status s = g.recv(0, 3, message, 16); !s.ok()) return s;
    return expect(fake.read<int32_t>(message, 4)[3] == 40, "received");
  });
  for (const absl::Status& s : results)
    EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(fake.communicators(), 2);
  EXPECT_EQ(fake.copies_to_host(), 0);

  FakeDeviceCollectives one(1);
  auto shared = form("shared", {0, 0}, &one, [&](CollectiveGroup& g) {
    if (absl::Status s = expect(g.device_path() == DevicePath::kStaged &&
                                    absl::StrContains(g.device_path_reason(), "share device"),
                                g.device_path_reason());
        !s.ok())
      return s;
    void* data = one.allocate_with(0, std::vector<float>(1000, g.rank() + 1.0f));
    if (absl::Status s = g.allreduce(DType::kFloat32, ReduceOp::kSum, data, 1000); !s.ok())
      return s;
    return expect(one.read<float>(data, 1000)[0] == 3.0f, "staged sum");
  });
  for (const absl::Status& s : shared)
    EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(one.communicators(), 0);
  EXPECT_GT(one.copies_to_host(), 0);
}

TEST_F(CollectiveDeviceTest, AbortFailsTheDeviceWorkOfEveryMember) {
  FakeDeviceCollectives fake(2);
  std::atomic<bool> posted{false};
  auto results = form("aborted", {0, 1}, &fake, [&](CollectiveGroup& g) {
    void* data = fake.allocate(g.device(), 4096);
    if (g.rank() == 0) {
      Work work = g.allreduce_async(DType::kFloat32, ReduceOp::kSum, data, 1024);
      while (!posted.load())
        absl::SleepFor(absl::Milliseconds(1));
      g.abort(absl::AbortedError("stopped by the driver"));
      absl::Status s = CollectiveGroup::wait(work);
      if (absl::Status e = expect(absl::IsAborted(s), s.ToString()); !e.ok()) return e;
      return expect(absl::IsAborted(g.failed()), g.failed().ToString());
    }
    Work work = g.recv_async(0, 1, data, 4096);  // never sent
    posted.store(true);
    absl::Status s = CollectiveGroup::wait(work);
    if (absl::Status e = expect(absl::IsAborted(s), s.ToString()); !e.ok()) return e;
    return expect(absl::IsAborted(g.failed()), g.failed().ToString());
  });
  for (const absl::Status& s : results)
    EXPECT_TRUE(s.ok()) << s;
}

}  // namespace
}  // namespace troupe::cluster
