// The GPU inventory without a GPU: CUDA_VISIBLE_DEVICES as CUDA reads it on
// a made-up device list, and NVML read from a stand-in library
// (fake_nvml.cc: two H100s and an A10) or from none at all.
#include "core/cluster/gpu_inventory.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace troupe::cluster {
namespace {

std::vector<GpuDevice> four_devices() {
  std::vector<GpuDevice> all;
  const char* uuids[] = {"GPU-0000aaaa-1111", "GPU-0000bbbb-2222", "GPU-1234cccc-3333",
                         "GPU-5678dddd-4444"};
  for (int i = 0; i < 4; ++i) {
    all.push_back({.index = i,
                   .name = "Model " + std::to_string(i),
                   .memory_bytes = int64_t{1} << 30,
                   .uuid = uuids[i]});
  }
  return all;
}

// The models of the devices kept, in CUDA's order, and that they are
// numbered 0..n-1.
std::vector<std::string> kept(const char* cuda_visible_devices) {
  std::vector<std::string> names;
  std::vector<GpuDevice> visible = cuda_visible(four_devices(), cuda_visible_devices);
  for (size_t i = 0; i < visible.size(); ++i) {
    EXPECT_EQ(visible[i].index, static_cast<int>(i)) << cuda_visible_devices;
    names.push_back(visible[i].name);
  }
  return names;
}

using Names = std::vector<std::string>;

TEST(CudaVisibleDevicesTest, UnsetKeepsEveryDevice) {
  EXPECT_EQ(kept(nullptr), (Names{"Model 0", "Model 1", "Model 2", "Model 3"}));
}

TEST(CudaVisibleDevicesTest, IndicesKeepAndRenumberInTheListsOrder) {
  EXPECT_EQ(kept("2"), (Names{"Model 2"}));
  EXPECT_EQ(kept("3,1"), (Names{"Model 3", "Model 1"}));
  EXPECT_EQ(kept(" 0 , 2 "), (Names{"Model 0", "Model 2"}));  // blanks around entries
}

TEST(CudaVisibleDevicesTest, UuidsAndUniquePrefixesNameDevices) {
  EXPECT_EQ(kept("GPU-5678dddd-4444"), (Names{"Model 3"}));
  EXPECT_EQ(kept("GPU-1234,0"), (Names{"Model 2", "Model 0"}));
  EXPECT_EQ(kept("gpu-0000BBBB"), (Names{"Model 1"}));  // hex in either case
  // "GPU-0000" is the prefix of two devices: it names neither.
  EXPECT_EQ(kept("3,GPU-0000,1"), (Names{"Model 3"}));
}

TEST(CudaVisibleDevicesTest, EmptyKeepsNone) {
  EXPECT_TRUE(kept("").empty());
}

TEST(CudaVisibleDevicesTest, AnInvalidEntryEndsTheList) {
  EXPECT_EQ(kept("1,7,2"), (Names{"Model 1"}));  // out of range
  EXPECT_EQ(kept("1,-1,2"), (Names{"Model 1"}));
  EXPECT_EQ(kept("0,x,2"), (Names{"Model 0"}));
  EXPECT_EQ(kept("0,1a,2"), (Names{"Model 0"}));
  EXPECT_EQ(kept("0,,2"), (Names{"Model 0"}));
  EXPECT_EQ(kept("2,GPU-ffff"), (Names{"Model 2"}));  // no such UUID
  EXPECT_EQ(kept("1,1,2"), (Names{"Model 1"}));       // listed twice
  EXPECT_EQ(kept("MIG-0000aaaa"), Names{});
  EXPECT_TRUE(kept("x,0").empty());
  EXPECT_TRUE(cuda_visible({}, "0").empty());
}

TEST(GpuInventoryTest, WithoutNvmlIsEmptyAndSaysWhy) {
  GpuInventory inventory = gpu_inventory("libtroupe-no-such-nvml.so.1", nullptr);
  EXPECT_TRUE(inventory.devices.empty());
  EXPECT_NE(inventory.note.find("no NVML"), std::string::npos) << inventory.note;
  EXPECT_NE(inventory.note.find("libtroupe-no-such-nvml.so.1"), std::string::npos)
      << inventory.note;
  EXPECT_EQ(describe(inventory), "no GPUs (" + inventory.note + ")");
}

TEST(GpuInventoryTest, ALibraryThatIsNotNvmlIsEmptyAndSaysWhy) {
  GpuInventory inventory = gpu_inventory("libc.so.6", nullptr);
  EXPECT_TRUE(inventory.devices.empty());
  EXPECT_NE(inventory.note.find("nvmlInit_v2"), std::string::npos) << inventory.note;
}

TEST(GpuInventoryTest, ReadsEveryDeviceFromNvml) {
  GpuInventory inventory = gpu_inventory(FAKE_NVML, nullptr);
  ASSERT_EQ(inventory.devices.size(), 3u) << inventory.note;
  const GpuDevice& h100 = inventory.devices[1];
  EXPECT_EQ(h100.index, 1);
  EXPECT_EQ(h100.name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(h100.memory_bytes, int64_t{81559} * 1024 * 1024);
  EXPECT_EQ(h100.uuid, "GPU-5c3b9f11-22aa-4c1d-9e0b-7d1c2a3b4c5d");
  EXPECT_EQ(describe(h100), "GPU 1: NVIDIA H100 80GB HBM3, 79.6 GiB");
  EXPECT_EQ(describe(inventory), "2 x NVIDIA H100 80GB HBM3 (79.6 GiB), 1 x NVIDIA A10 (22.5 GiB)");
}

TEST(GpuInventoryTest, AppliesCudaVisibleDevices) {
  GpuInventory inventory = gpu_inventory(FAKE_NVML, "2,GPU-5c3b8");
  ASSERT_EQ(inventory.devices.size(), 2u) << inventory.note;
  EXPECT_EQ(describe(inventory.devices[0]), "GPU 0: NVIDIA A10, 22.5 GiB");
  EXPECT_EQ(inventory.devices[1].uuid, "GPU-5c3b8a0e-1b4b-6a5f-1e7f-2f0a9c1e7d3b");
  // "GPU-5c3b" is both H100s' prefix.
  EXPECT_EQ(gpu_inventory(FAKE_NVML, "GPU-5c3b").devices.size(), 0u);
  GpuInventory none = gpu_inventory(FAKE_NVML, "");
  EXPECT_TRUE(none.devices.empty());
  EXPECT_NE(none.note.find("CUDA_VISIBLE_DEVICES"), std::string::npos) << none.note;
}

TEST(GpuInventoryTest, AnNvmlErrorIsEmptyAndSaysWhy) {
  ::setenv("FAKE_NVML_INIT_ERROR", "9", 1);
  GpuInventory inventory = gpu_inventory(FAKE_NVML, nullptr);
  ::unsetenv("FAKE_NVML_INIT_ERROR");
  EXPECT_TRUE(inventory.devices.empty());
  EXPECT_NE(inventory.note.find("nvmlInit_v2 failed: Driver Not Loaded (NVML code 9)"),
            std::string::npos)
      << inventory.note;
}

TEST(GpuInventoryTest, TheEnvironmentNamesTheLibraryAndTheVisibleDevices) {
  ::setenv("TROUPE_NVML_LIBRARY", FAKE_NVML, 1);
  ::setenv("CUDA_VISIBLE_DEVICES", "1", 1);
  GpuInventory inventory = gpu_inventory();
  ::unsetenv("TROUPE_NVML_LIBRARY");
  ::unsetenv("CUDA_VISIBLE_DEVICES");
  ASSERT_EQ(inventory.devices.size(), 1u) << inventory.note;
  EXPECT_EQ(inventory.devices[0].uuid, "GPU-5c3b9f11-22aa-4c1d-9e0b-7d1c2a3b4c5d");
}

TEST(GpuInventoryTest, ANodeOffersTheFirstNAndStandInsPastThem) {
  GpuInventory found = gpu_inventory(FAKE_NVML, nullptr);
  ASSERT_EQ(found.devices.size(), 3u);
  std::vector<GpuDevice> two = gpus_for_count(found.devices, 2);
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[1].name, "NVIDIA H100 80GB HBM3");
  std::vector<GpuDevice> five = gpus_for_count(found.devices, 5);
  ASSERT_EQ(five.size(), 5u);
  EXPECT_EQ(five[2].name, "NVIDIA A10");
  EXPECT_EQ(describe(five[4]), "GPU 4: GPU, memory unknown");
  EXPECT_TRUE(five[4].uuid.empty());
  EXPECT_TRUE(gpus_for_count(found.devices, 0).empty());
  EXPECT_EQ(describe(GpuInventory{.devices = gpus_for_count({}, 2)}), "2 x GPU (memory unknown)");
}

}  // namespace
}  // namespace troupe::cluster
