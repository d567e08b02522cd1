#include "transport/rdma_inventory.h"

#include <gtest/gtest.h>

namespace troupe::transport {
namespace {

TEST(RdmaInventoryTest, ReportsDevicesOrSaysWhyNot) {
  RdmaInventory inv = rdma_inventory();
  std::string text = describe(inv);
  if (inv.devices.empty()) {
    EXPECT_FALSE(inv.note.empty());
    EXPECT_EQ(text.rfind("no RDMA devices (", 0), 0u) << text;
  } else {
    for (const RdmaDevice& d : inv.devices)
      EXPECT_FALSE(d.name.empty());
    EXPECT_NE(text.find(inv.devices[0].name), std::string::npos);
  }
  std::printf("%s\n", text.c_str());
}

}  // namespace
}  // namespace troupe::transport
