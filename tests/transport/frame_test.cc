#include "transport/frame.h"

#include <gtest/gtest.h>

#include <cstring>

#include "transport/message.h"
#include "transport/schema/handshake.capnp.h"

namespace troupe::transport {
namespace {

Frame hello_frame(std::vector<size_t> buffer_sizes) {
  capnp::MallocMessageBuilder builder;
  auto hello = builder.initRoot<schema::Hello>();
  hello.setProtocolVersion(7);
  hello.setPeerName("test peer");
  Frame f;
  f.kind = FrameKind::kHello;
  f.message = to_buffer(builder);
  for (size_t i = 0; i < buffer_sizes.size(); ++i) {
    Buffer b(buffer_sizes[i]);
    for (size_t j = 0; j < b.size(); ++j)
      b.data()[j] = static_cast<std::byte>(i * 31 + j);
    f.buffers.push_back(std::move(b));
  }
  return f;
}

TEST(FrameTest, RoundTripWithBuffers) {
  Frame f = hello_frame({0, 1, 7, 4096, 100003});
  std::vector<std::byte> wire = encode_frame(f);
  EXPECT_EQ(wire.size(), f.wire_bytes());
  absl::StatusOr<Frame> back = decode_frame(wire, FrameLimits{});
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->kind, FrameKind::kHello);
  ASSERT_EQ(back->buffers.size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    ASSERT_EQ(back->buffers[i].size(), f.buffers[i].size());
    EXPECT_EQ(std::memcmp(back->buffers[i].data(), f.buffers[i].data(), f.buffers[i].size()), 0);
  }
  auto reader = read_message(back->message);
  auto hello = reader.getRoot<schema::Hello>();
  EXPECT_EQ(hello.getProtocolVersion(), 7);
  EXPECT_EQ(std::string(hello.getPeerName().cStr()), "test peer");
}

// A frame refitted to a new shape keeps the storage that fits and makes the rest.
TEST(FrameTest, RefitReusesWhatFits) {
  Frame f;
  const uint64_t first[] = {8, 300};
  refit(f, FrameKind::kData, 16, first);
  ASSERT_EQ(f.buffers.size(), 2u);
  EXPECT_EQ(f.message.size(), 16u);
  EXPECT_EQ(f.buffers[0].size(), 8u);
  EXPECT_EQ(f.buffers[1].size(), 300u);
  const std::byte* kept = f.buffers[0].data();
  Buffer taken = std::move(f.buffers[1]);  // what a callback keeps
  const uint64_t second[] = {16, 200, 0};
  refit(f, FrameKind::kClose, 0, second);
  EXPECT_EQ(f.kind, FrameKind::kClose);
  EXPECT_TRUE(f.message.empty());
  ASSERT_EQ(f.buffers.size(), 3u);
  EXPECT_EQ(f.buffers[0].data(), kept);
  EXPECT_EQ(f.buffers[0].size(), 16u);
  EXPECT_EQ(f.buffers[1].size(), 200u);
  EXPECT_NE(f.buffers[1].data(), taken.data());
  EXPECT_TRUE(f.buffers[2].empty());
  refit(f, FrameKind::kData, 0, {});
  EXPECT_TRUE(f.buffers.empty());
}

TEST(FrameTest, EmptyFrame) {
  Frame f;
  f.kind = FrameKind::kClose;
  std::vector<std::byte> wire = encode_frame(f);
  EXPECT_EQ(wire.size(), kFrameHeaderBytes);
  absl::StatusOr<Frame> back = decode_frame(wire, FrameLimits{});
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->kind, FrameKind::kClose);
}

absl::StatusCode decode_code(const std::vector<std::byte>& wire, FrameLimits limits = {}) {
  return decode_frame(wire, limits).status().code();
}

TEST(FrameTest, RejectsTruncationAtEveryLength) {
  std::vector<std::byte> wire = encode_frame(hello_frame({10, 20}));
  for (size_t n = 0; n < wire.size(); ++n) {
    std::vector<std::byte> cut(wire.begin(), wire.begin() + static_cast<long>(n));
    EXPECT_EQ(decode_code(cut), absl::StatusCode::kInvalidArgument) << "length " << n;
  }
}

TEST(FrameTest, RejectsBadMagicVersionKindAndReservedBits) {
  std::vector<std::byte> good = encode_frame(hello_frame({}));
  auto corrupt = [&](size_t at, std::byte value) {
    std::vector<std::byte> w = good;
    w[at] = value;
    return decode_frame(w, FrameLimits{}).status();
  };
  EXPECT_NE(corrupt(0, std::byte{'X'}).message().find("magic"), absl::string_view::npos);
  EXPECT_NE(corrupt(4, std::byte{2}).message().find("version 2"), absl::string_view::npos);
  EXPECT_NE(corrupt(5, std::byte{99}).message().find("unknown frame"), absl::string_view::npos);
  EXPECT_EQ(corrupt(12, std::byte{1}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(corrupt(24, std::byte{1}).code(), absl::StatusCode::kInvalidArgument);
}

TEST(FrameTest, RejectsOversizedFramesBeforeReadingThem) {
  FrameLimits small;
  small.max_frame_bytes = 1000;
  small.max_buffers = 2;
  small.max_message_bytes = 16;  // smaller than any Hello
  EXPECT_EQ(decode_code(encode_frame(hello_frame({2000})), small),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(decode_code(encode_frame(hello_frame({1, 1, 1})), small),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(decode_code(encode_frame(hello_frame({})), small),
            absl::StatusCode::kResourceExhausted);
  // A header alone claiming a huge frame fails on the header, with nothing allocated.
  FrameHeader h;
  h.buffer_count = 1;
  h.buffers_bytes = uint64_t{1} << 50;
  auto header = encode_header(h);
  EXPECT_EQ(decode_header(header, FrameLimits{}).status().code(),
            absl::StatusCode::kResourceExhausted);
}

TEST(FrameTest, RejectsInconsistentLengths) {
  std::vector<std::byte> wire = encode_frame(hello_frame({8, 8}));
  uint64_t wrong = 9;
  std::memcpy(wire.data() + kFrameHeaderBytes, &wrong, 8);
  EXPECT_EQ(decode_code(wire), absl::StatusCode::kInvalidArgument);
}

TEST(FrameTest, RejectsMalformedCapnProto) {
  Frame f = hello_frame({});
  // Point the root at a far-away offset: the segment is too small for it.
  uint64_t bogus_pointer = (uint64_t{0x7fff} << 2) | (uint64_t{4} << 32);
  std::memcpy(f.message.data() + 8, &bogus_pointer, 8);
  EXPECT_EQ(decode_code(encode_frame(f)), absl::StatusCode::kInvalidArgument);
  // Garbage words where the segment table should be.
  Frame g = hello_frame({});
  std::memset(g.message.data(), 0xff, 8);
  EXPECT_EQ(decode_code(encode_frame(g)), absl::StatusCode::kInvalidArgument);
}

TEST(FrameTest, TraversalLimitBoundsWork) {
  FrameLimits tight;
  tight.traversal_limit_words = 2;
  absl::Status s = decode_frame(encode_frame(hello_frame({})), tight).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("traversal"), absl::string_view::npos) << s;
}

}  // namespace
}  // namespace troupe::transport
