#include "transport/buffer.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace troupe::transport {
namespace {

TEST(BufferTest, SizesIncludingZeroAndOdd) {
  for (size_t size :
       {size_t{0}, size_t{1}, size_t{63}, size_t{64}, size_t{1001}, size_t{1} << 20}) {
    Buffer b(size);
    EXPECT_EQ(b.size(), size);
    if (size > 0) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % Buffer::kAlignment, 0u);
      std::memset(b.data(), 0xab, size);
      EXPECT_EQ(static_cast<unsigned char>(b.data()[size - 1]), 0xab);
    } else {
      EXPECT_TRUE(b.empty());
    }
  }
}

TEST(BufferTest, CopyOfAndMove) {
  std::vector<std::byte> src(777);
  for (size_t i = 0; i < src.size(); ++i)
    src[i] = static_cast<std::byte>(i * 31);
  Buffer a = Buffer::copy_of(src);
  ASSERT_EQ(a.size(), src.size());
  EXPECT_EQ(std::memcmp(a.data(), src.data(), src.size()), 0);
  const std::byte* p = a.data();
  Buffer b = std::move(a);
  EXPECT_EQ(b.data(), p) << "moving hands the storage over";
  EXPECT_TRUE(a.empty());  // NOLINT(bugprone-use-after-move): moved-from is empty
  Buffer c;
  c = std::move(b);
  EXPECT_EQ(c.size(), src.size());
}

}  // namespace
}  // namespace troupe::transport
