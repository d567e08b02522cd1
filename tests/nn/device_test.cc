// nn/device.h and nn/device_backend.h: device names, the CPU backend against nn/optim, and what
// a machine without a GPU says when CUDA is asked for.
#include "nn/device.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "nn/device_backend.h"
#include "nn/dtype.h"
#include "nn/memory.h"
#include "nn/optim/adamw.h"
#include "nn/optim/clip.h"
#include "nn/optim/sgd.h"

namespace troupe::nn {
namespace {

TEST(DeviceTest, ParsesAndNamesDevicesAsPyTorchDoes) {
  EXPECT_EQ(*parse_device("cpu"), Device::cpu());
  EXPECT_EQ(*parse_device("cuda"), Device::cuda(0));
  EXPECT_EQ(*parse_device("cuda:3"), Device::cuda(3));
  EXPECT_EQ(to_string(Device::cpu()), "cpu");
  EXPECT_EQ(to_string(Device::cuda(1)), "cuda:1");
  for (const char* bad : {"", "gpu", "cuda:", "cuda:-1", "cuda:1x", "CPU", "cpu:0"}) {
    absl::StatusOr<Device> d = parse_device(bad);
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_NE(parse_device("gpu").status().message().find("\"gpu\""), std::string_view::npos);
}

// Runs everywhere: without a GPU the device layer reports that cleanly.
TEST(DeviceTest, ReportsDevicesWithoutRequiringOne) {
  int n = cuda_device_count();
  EXPECT_GE(n, 0);
  absl::Status self_test = cuda_self_test();
  if (n == 0) {
    EXPECT_EQ(self_test.code(), absl::StatusCode::kFailedPrecondition) << self_test;
    std::printf("no CUDA device (%s): GPU self-test skipped\n", describe_devices().c_str());
  } else {
    EXPECT_TRUE(self_test.ok()) << self_test;
  }
  EXPECT_FALSE(describe_devices().empty());
}

TEST(DeviceTest, ChecksTheDeviceAskedFor) {
  EXPECT_TRUE(check_device(Device::cpu()).ok());
  EXPECT_EQ(check_device(Device{DeviceKind::kCpu, 1}).code(), absl::StatusCode::kInvalidArgument);
  const int n = cuda_device_count();
  absl::Status beyond = check_device(Device::cuda(n));
  EXPECT_EQ(beyond.code(), absl::StatusCode::kFailedPrecondition) << beyond;
  EXPECT_NE(beyond.message().find(absl::StrCat("cuda:", n)), std::string_view::npos) << beyond;
  if (n > 0) {
    EXPECT_TRUE(check_device(Device::cuda(n - 1)).ok());
  }
}

TEST(DeviceTest, CudaMemoryWithoutADeviceIsARefusalNotACrash) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "this machine has a CUDA device";
  absl::StatusOr<void*> p = allocate(Device::cuda(0), MemoryCategory::kParameters, 1024);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kFailedPrecondition) << p.status();
  EXPECT_EQ(MemoryTracker::global().total_live_bytes(DeviceKind::kCuda), 0);
}

TEST(DeviceTest, CpuMemoryGoesThroughTheBackendAndIsCounted) {
  const int64_t before = MemoryTracker::global().live_bytes(MemoryCategory::kOther);
  absl::StatusOr<void*> p = allocate(Device::cpu(), MemoryCategory::kOther, 100);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(*p) % kAlignment, 0u);
  EXPECT_EQ(MemoryTracker::global().live_bytes(MemoryCategory::kOther), before + 128);
  std::vector<uint8_t> host(100, 7);
  ASSERT_TRUE(copy_bytes(*p, Device::cpu(), host.data(), Device::cpu(), 100).ok());
  EXPECT_EQ(static_cast<uint8_t*>(*p)[99], 7);
  ASSERT_TRUE(zero_bytes(*p, Device::cpu(), 100).ok());
  EXPECT_EQ(static_cast<uint8_t*>(*p)[99], 0);
  deallocate(Device::cpu(), MemoryCategory::kOther, *p, 100);
  EXPECT_EQ(MemoryTracker::global().live_bytes(MemoryCategory::kOther), before);
}

// The CPU backend's optimizer calls are nn/optim's, bit for bit.
TEST(DeviceTest, CpuBackendRunsTheOptimizerKernels) {
  constexpr size_t kN = 1000;
  std::vector<float> p(kN), g(kN), m(kN, 0.0f), v(kN, 0.0f);
  for (size_t i = 0; i < kN; ++i) {
    p[i] = static_cast<float>(i % 13) / 7.0f - 0.9f;
    g[i] = static_cast<float>(i % 29) / 11.0f - 1.3f;
  }
  std::vector<float> p2 = p, m2 = m, v2 = v;
  const AdamWConfig config{.lr = 1e-2f, .weight_decay = 0.1f};
  const ParamRange no_decay[] = {{100, 200}, {500, 510}};
  DeviceBackend& cpu = cpu_backend();
  for (int step = 1; step <= 3; ++step) {
    ASSERT_TRUE(cpu.adamw_update(0, {.params = p.data(),
                                     .grads = g.data(),
                                     .m = m.data(),
                                     .v = v.data(),
                                     .n = kN,
                                     .config = config,
                                     .lr = 5e-3f,
                                     .step = step,
                                     .no_decay = no_decay})
                    .ok());
    adamw_update(p2.data(), g.data(), m2.data(), v2.data(), kN, config, 5e-3f, step, no_decay);
  }
  EXPECT_EQ(std::memcmp(p.data(), p2.data(), kN * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(v.data(), v2.data(), kN * sizeof(float)), 0);

  std::vector<float> b(kN), q = p;
  const SgdConfig sgd{.lr = 0.1f, .momentum = 0.9f};
  ASSERT_TRUE(cpu.sgd_update(0, {.params = p.data(),
                                 .grads = g.data(),
                                 .momentum_buffer = b.data(),
                                 .n = kN,
                                 .config = sgd,
                                 .lr = 0.1f,
                                 .step = 1})
                  .ok());
  std::vector<float> b2(kN);
  sgd_update(q.data(), g.data(), b2.data(), kN, sgd, 0.1f, 1);
  EXPECT_EQ(std::memcmp(p.data(), q.data(), kN * sizeof(float)), 0);

  EXPECT_EQ(*cpu.grad_norm_squared(0, g.data(), kN), grad_norm_squared(g.data(), kN));
  ASSERT_TRUE(cpu.scale(0, g.data(), kN, 0.5f).ok());
  EXPECT_EQ(g[28], (static_cast<float>(28) / 11.0f - 1.3f) * 0.5f);
  EXPECT_FALSE(*cpu.has_inf_or_nan(0, g.data(), kN));
  g[kN - 1] = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(*cpu.has_inf_or_nan(0, g.data(), kN));
}

// Mixed precision's compute copy: each value as its bf16 / fp16 rounding holds it.
TEST(DeviceTest, CpuBackendRoundsThroughTheComputeType) {
  std::vector<float> in = {1.0f, 1.00390625f, 1.005859375f, 3.14159265f, -65504.0f, 1e-8f};
  for (DType type : {DType::kBFloat16, DType::kFloat16}) {
    std::vector<float> out(in.size());
    ASSERT_TRUE(cpu_backend().round_to(0, out.data(), in.data(), in.size(), type).ok());
    for (size_t i = 0; i < in.size(); ++i) {
      uint16_t narrow = 0;
      float expected = 0;
      convert(&in[i], DType::kFloat32, &narrow, type, 1);
      convert(&narrow, type, &expected, DType::kFloat32, 1);
      EXPECT_EQ(out[i], expected) << to_string(type) << " " << in[i];
    }
    EXPECT_NE(out[3], in[3]);  // pi is not a bf16 or fp16 value
  }
  std::vector<float> same(in.size());
  ASSERT_TRUE(cpu_backend().round_to(0, same.data(), in.data(), in.size(), DType::kFloat32).ok());
  EXPECT_EQ(same, in);
}

}  // namespace
}  // namespace troupe::nn
