#include "nn/device.h"

#include <gtest/gtest.h>

namespace troupe::nn {
namespace {

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

}  // namespace
}  // namespace troupe::nn
