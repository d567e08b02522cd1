// The CUDA backend (nn/device_backend.h) against the CPU's: the optimizer's updates give the
// CPU's bits, the reductions its values within rounding, copies round-trip. Loaded the way
// training loads it (backend(DeviceKind::kCuda)). Without a CUDA device every test skips, saying
// why; TROUPE_REQUIRE_GPU=1 turns that into a failure, for the GPU check (scripts/gpu_check.sh).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "nn/device.h"
#include "nn/device_backend.h"
#include "nn/dtype.h"
#include "nn/memory.h"
#include "nn/optim/adamw.h"
#include "nn/optim/clip.h"
#include "nn/optim/sgd.h"

namespace troupe::nn {
namespace {

constexpr Device kGpu = Device::cuda(0);

class CudaBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<DeviceBackend*> b = backend(DeviceKind::kCuda);
    std::string why;
    if (!b.ok()) {
      why = std::string(b.status().message());
    } else if ((*b)->device_count() == 0) {
      why = "no CUDA device";
    } else {
      cuda_ = *b;
      return;
    }
    const char* require = std::getenv("TROUPE_REQUIRE_GPU");
    if (require != nullptr && std::string(require) == "1") {
      FAIL() << "TROUPE_REQUIRE_GPU=1 but the CUDA backend is not usable: " << why;
    }
    GTEST_SKIP() << "needs a CUDA device: " << why;
  }

  // n floats on the GPU holding `host`; freed by TearDown.
  float* upload(const std::vector<float>& host) {
    absl::StatusOr<void*> p = allocate(kGpu, MemoryCategory::kOther, bytes(host.size()));
    EXPECT_TRUE(p.ok()) << p.status();
    auto* data = static_cast<float*>(*p);
    EXPECT_TRUE(copy_bytes(data, kGpu, host.data(), Device::cpu(), bytes(host.size())).ok());
    held_.push_back({data, host.size()});
    return data;
  }
  std::vector<float> download(const float* data, size_t n) {
    std::vector<float> host(n);
    EXPECT_TRUE(copy_bytes(host.data(), Device::cpu(), data, kGpu, bytes(n)).ok());
    return host;
  }
  void TearDown() override {
    for (auto [data, n] : held_)
      deallocate(kGpu, MemoryCategory::kOther, data, bytes(n));
  }
  static int64_t bytes(size_t n) { return static_cast<int64_t>(n * sizeof(float)); }

  DeviceBackend* cuda_ = nullptr;
  std::vector<std::pair<float*, size_t>> held_;
};

std::vector<float> random_values(size_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> out(n);
  for (float& x : out)
    x = normal(rng);
  return out;
}

TEST_F(CudaBackendTest, AdamWGivesTheCpusBits) {
  constexpr size_t kN = 100003;  // not a multiple of any block
  std::vector<float> p = random_values(kN, 1, 0.02f), g = random_values(kN, 2, 1e-3f);
  std::vector<float> m(kN, 0.0f), v(kN, 0.0f);
  float* dp = upload(p);
  float* dg = upload(g);
  float* dm = upload(m);
  float* dv = upload(v);
  const AdamWConfig config{.lr = 6e-4f, .beta2 = 0.95f, .weight_decay = 0.1f};
  const ParamRange no_decay[] = {{1000, 2000}, {50000, 50017}};
  for (int step = 1; step <= 3; ++step) {
    ASSERT_TRUE(cuda_
                    ->adamw_update(0, {.params = dp,
                                       .grads = dg,
                                       .m = dm,
                                       .v = dv,
                                       .n = kN,
                                       .config = config,
                                       .lr = 6e-4f,
                                       .step = step,
                                       .no_decay = no_decay})
                    .ok());
    adamw_update(p.data(), g.data(), m.data(), v.data(), kN, config, 6e-4f, step, no_decay);
  }
  EXPECT_EQ(std::memcmp(download(dp, kN).data(), p.data(), kN * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(download(dm, kN).data(), m.data(), kN * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(download(dv, kN).data(), v.data(), kN * sizeof(float)), 0);
}

TEST_F(CudaBackendTest, SgdWithNesterovMomentumGivesTheCpusBits) {
  constexpr size_t kN = 4099;
  std::vector<float> p = random_values(kN, 3, 0.5f), g = random_values(kN, 4, 0.1f);
  std::vector<float> b(kN, 0.0f);
  float* dp = upload(p);
  float* dg = upload(g);
  float* db = upload(b);
  const SgdConfig config{.lr = 0.1f, .momentum = 0.9f, .weight_decay = 1e-4f, .nesterov = true};
  for (int step = 1; step <= 2; ++step) {
    ASSERT_TRUE(cuda_
                    ->sgd_update(0, {.params = dp,
                                     .grads = dg,
                                     .momentum_buffer = db,
                                     .n = kN,
                                     .config = config,
                                     .lr = 0.05f,
                                     .step = step})
                    .ok());
    sgd_update(p.data(), g.data(), b.data(), kN, config, 0.05f, step);
  }
  EXPECT_EQ(std::memcmp(download(dp, kN).data(), p.data(), kN * sizeof(float)), 0);
}

TEST_F(CudaBackendTest, ReductionsAgreeWithTheCpuAndRepeat) {
  constexpr size_t kN = 1 << 20;
  std::vector<float> g = random_values(kN, 5, 1.0f);
  float* dg = upload(g);
  const double cpu = grad_norm_squared(g.data(), kN);
  absl::StatusOr<double> first = cuda_->grad_norm_squared(0, dg, kN);
  absl::StatusOr<double> second = cuda_->grad_norm_squared(0, dg, kN);
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_NEAR(*first, cpu, 1e-12 * cpu);
  EXPECT_EQ(*first, *second);  // a fixed order of additions
  EXPECT_FALSE(*cuda_->has_inf_or_nan(0, dg, kN));
  ASSERT_TRUE(cuda_->scale(0, dg, kN, 0.25f).ok());
  EXPECT_EQ(download(dg, kN)[kN - 1], g[kN - 1] * 0.25f);
  g[12345] = std::numeric_limits<float>::quiet_NaN();
  float* with_nan = upload(g);
  EXPECT_TRUE(*cuda_->has_inf_or_nan(0, with_nan, kN));
}

TEST_F(CudaBackendTest, RoundsThroughTheComputeTypeAsTheCpu) {
  constexpr size_t kN = 65537;
  std::vector<float> in = random_values(kN, 6, 3.0f);
  in[0] = 70000.0f;  // beyond fp16: inf
  float* d_in = upload(in);
  float* d_out = upload(std::vector<float>(kN, 0.0f));
  for (DType type : {DType::kBFloat16, DType::kFloat16}) {
    std::vector<float> cpu(kN);
    ASSERT_TRUE(cpu_backend().round_to(0, cpu.data(), in.data(), kN, type).ok());
    ASSERT_TRUE(cuda_->round_to(0, d_out, d_in, kN, type).ok());
    EXPECT_EQ(std::memcmp(download(d_out, kN).data(), cpu.data(), kN * sizeof(float)), 0)
        << to_string(type);
  }
}

TEST_F(CudaBackendTest, CountsDeviceMemoryApartFromTheCpus) {
  const int64_t before = MemoryTracker::global().total_live_bytes(DeviceKind::kCuda);
  float* d = upload(std::vector<float>(1000, 1.0f));
  EXPECT_EQ(MemoryTracker::global().total_live_bytes(DeviceKind::kCuda), before + 4032);
  ASSERT_TRUE(zero_bytes(d, kGpu, 4000).ok());
  EXPECT_EQ(download(d, 1000)[999], 0.0f);
  EXPECT_TRUE(cuda_->synchronize(0).ok());
  EXPECT_FALSE(cuda_->describe(0).empty());
}

}  // namespace
}  // namespace troupe::nn
