#include "transport/buffer.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
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

namespace troupe::transport {
namespace {

// Reuse keeps owned storage that holds the new size, and refuses the rest.
TEST(BufferTest, ReuseKeepsStorageThatFits) {
  Buffer small(40);
  std::byte* p = small.data();
  EXPECT_TRUE(small.reuse(8));
  EXPECT_EQ(small.size(), 8u);
  EXPECT_EQ(small.data(), p);
  EXPECT_TRUE(small.reuse(64)) << "a small block holds its size rounded up to 64";
  EXPECT_FALSE(small.reuse(65));
  EXPECT_EQ(small.size(), 64u);
  EXPECT_FALSE(small.reuse(0)) << "an empty buffer holds no storage";

  Buffer large(size_t{100} << 10);  // a 128 KiB block from the large-block cache
  p = large.data();
  EXPECT_TRUE(large.reuse(size_t{128} << 10));
  EXPECT_EQ(large.data(), p);
  EXPECT_FALSE(large.reuse(size_t{64} << 10)) << "a large block keeps its size class";
  EXPECT_FALSE(large.reuse(1000));
  EXPECT_EQ(large.size(), size_t{128} << 10);

  Buffer none;
  EXPECT_FALSE(none.reuse(8));
  auto storage = std::make_shared<std::vector<std::byte>>(100);
  Buffer lent = Buffer::borrow(storage, storage->data(), storage->size());
  EXPECT_FALSE(lent.reuse(10)) << "borrowed storage is not the buffer's to reuse";
}

TEST(BufferTest, BorrowKeepsTheOwnerAliveAndCopiesNothing) {
  auto storage = std::make_shared<std::vector<std::byte>>(1000, std::byte{7});
  std::weak_ptr<std::vector<std::byte>> watch = storage;
  Buffer b = Buffer::borrow(storage, storage->data(), storage->size());
  EXPECT_TRUE(b.borrowed());
  EXPECT_EQ(b.data(), storage->data());
  storage.reset();
  EXPECT_FALSE(watch.expired()) << "the buffer keeps its owner alive";
  Buffer moved = std::move(b);
  EXPECT_EQ(static_cast<int>(moved.data()[999]), 7);
  moved = Buffer(16);
  EXPECT_TRUE(watch.expired()) << "and lets it go when done";
}

}  // namespace
}  // namespace troupe::transport
