// TensorBoard event files written by troupe (trainers/tensorboard.h), read back record by record:
// the TFRecord framing with its masked CRC-32Cs, the Events' fields, and the scalars of a job's
// report under their tags.
#include "trainers/tensorboard.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace troupe::trainers {
namespace {

// One Event as the test reads it back (the fields the writer writes).
struct ReadEvent {
  double wall_time = 0;
  int64_t step = 0;
  std::string file_version, tag;
  float value = 0;
};

uint64_t read_varint(std::string_view& in) {
  uint64_t v = 0;
  for (int shift = 0; !in.empty(); shift += 7) {
    const auto b = static_cast<unsigned char>(in.front());
    in.remove_prefix(1);
    v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if ((b & 0x80) == 0) break;
  }
  return v;
}

// The fields of a message: (field, wire type, bytes of a length-delimited or fixed value).
void parse(std::string_view in, ReadEvent* e, int depth) {
  while (!in.empty()) {
    const uint64_t k = read_varint(in);
    const int field = static_cast<int>(k >> 3), type = static_cast<int>(k & 7);
    if (type == 0) {
      const uint64_t v = read_varint(in);
      if (depth == 0 && field == 2) e->step = static_cast<int64_t>(v);
    } else if (type == 1) {
      if (depth == 0 && field == 1) std::memcpy(&e->wall_time, in.data(), 8);
      in.remove_prefix(8);
    } else if (type == 5) {
      if (depth == 2 && field == 2) std::memcpy(&e->value, in.data(), 4);
      in.remove_prefix(4);
    } else if (type == 2) {
      const uint64_t n = read_varint(in);
      const std::string_view body = in.substr(0, n);
      in.remove_prefix(n);
      if (depth == 0 && field == 3) e->file_version = body;
      if (depth == 2 && field == 1) e->tag = body;
      if ((depth == 0 && field == 5) || (depth == 1 && field == 1)) parse(body, e, depth + 1);
    } else {
      ADD_FAILURE() << "wire type " << type;
      return;
    }
  }
}

// Every record of `path`, its CRCs checked.
std::vector<ReadEvent> read_events(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  std::stringstream s;
  s << file.rdbuf();
  const std::string all = s.str();
  std::string_view in = all;
  std::vector<ReadEvent> out;
  while (!in.empty()) {
    EXPECT_GE(in.size(), 12u);
    uint64_t length = 0;
    uint32_t length_crc = 0, data_crc = 0;
    std::memcpy(&length, in.data(), 8);
    std::memcpy(&length_crc, in.data() + 8, 4);
    EXPECT_EQ(length_crc, masked_crc32c(in.substr(0, 8)));
    const std::string_view data = in.substr(12, length);
    std::memcpy(&data_crc, in.data() + 12 + length, 4);
    EXPECT_EQ(data_crc, masked_crc32c(data));
    ReadEvent e;
    parse(data, &e, 0);
    out.push_back(e);
    in.remove_prefix(12 + length + 4);
  }
  return out;
}

TEST(TensorBoardTest, Crc32cIsCastagnolis) {
  EXPECT_EQ(crc32c(""), 0u);
  EXPECT_EQ(crc32c("123456789"), 0xe3069283u);            // the standard check value
  EXPECT_EQ(crc32c(std::string(32, '\0')), 0x8a9136aau);  // RFC 3720's
}

TEST(TensorBoardTest, ScalarsReadBackUnderTheirTagsAndSteps) {
  const std::string dir = ::testing::TempDir() + "/tensorboard_test";
  std::filesystem::remove_all(dir);
  absl::StatusOr<TensorBoardWriter> tb = TensorBoardWriter::open(dir + "/run");
  ASSERT_TRUE(tb.ok()) << tb.status();
  EXPECT_NE(tb->path().find("/run/events.out.tfevents."), std::string::npos);
  ASSERT_TRUE(tb->scalar("loss", 1, 2.5, 1000.25).ok());
  cluster::MetricsReport report{.step = 2, .unix_seconds = 1001.5};
  report.points = {
      {.name = "loss", .value = 2.0},
      {.name = "step", .value = 2},
      {.name = "step_seconds", .labels = "part=\"compute\"", .value = 0.125},
      {.name = "memory_bytes", .labels = "rank=\"d0.p0.t0\",category=\"x\"", .value = 1}};
  ASSERT_TRUE(tb->report(report).ok());
  const std::vector<ReadEvent> events = read_events(tb->path());
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  EXPECT_EQ(events[1].tag, "loss");
  EXPECT_EQ(events[1].step, 1);
  EXPECT_EQ(events[1].value, 2.5f);
  EXPECT_EQ(events[1].wall_time, 1000.25);
  EXPECT_EQ(events[2].tag, "loss");
  EXPECT_EQ(events[2].step, 2);
  EXPECT_EQ(events[3].tag, "step_seconds/compute");
  EXPECT_EQ(events[3].value, 0.125f);
  std::filesystem::remove_all(dir);
}

TEST(TensorBoardTest, ADirectoryThatCannotBeMadeIsAnErrorNamingIt) {
  absl::StatusOr<TensorBoardWriter> tb = TensorBoardWriter::open("/proc/no/such/dir");
  ASSERT_FALSE(tb.ok());
  EXPECT_NE(tb.status().message().find("/proc/no/such/dir"), std::string::npos) << tb.status();
}

}  // namespace
}  // namespace troupe::trainers
