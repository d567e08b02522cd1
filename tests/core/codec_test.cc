#include "core/codec.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "core/status.h"

// The largest single allocation while `g_track_allocations` is set, so that
// tests can show a hostile count is rejected before anything is allocated.
namespace {
std::atomic<bool> g_track_allocations{false};
std::atomic<size_t> g_largest_allocation{0};
}  // namespace

// GCC pairs the free() below with the std::allocator call sites it is inlined
// into and misreads the replaced operator new as a mismatch.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(std::size_t size) {
  if (g_track_allocations.load(std::memory_order_relaxed)) {
    size_t seen = g_largest_allocation.load(std::memory_order_relaxed);
    while (size > seen && !g_largest_allocation.compare_exchange_weak(seen, size)) {
    }
  }
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}

namespace troupe {
namespace {

using transport::Buffer;

struct Unregistered {
  int x = 0;
};

struct Point {
  int32_t x = 0;
  int32_t y = 0;
  TROUPE_FIELDS(x, y);
  friend bool operator==(const Point&, const Point&) = default;
};

struct Segment {
  Point from;
  Point to;
  std::string label;
  std::vector<Point> waypoints;
  std::optional<double> weight;
  TROUPE_FIELDS(from, to, label, waypoints, weight);
  friend bool operator==(const Segment&, const Segment&) = default;
};

// A recursive type: a tree nests one container level per tree level.
struct Tree {
  std::vector<Tree> children;
  TROUPE_FIELDS(children);
  friend bool operator==(const Tree&, const Tree&) = default;
};

struct WithBadField {
  Unregistered inner;
};

enum class Color : uint8_t { kRed = 1, kGreen = 2 };
enum Wide : int64_t { kNegative = -5, kHuge = int64_t{1} << 40 };

static_assert(Codable<int>);
static_assert(Codable<std::string>);
static_assert(Codable<Point>);
static_assert(Codable<Tree>);
static_assert(Codable<std::map<std::string, std::vector<std::optional<Segment>>>>);
static_assert(Codable<absl::StatusOr<std::tuple<int, Buffer>>>);
static_assert(!Codable<Unregistered>);
static_assert(!Codable<WithBadField>);
static_assert(!Codable<std::vector<Unregistered>>);
static_assert(!Codable<std::map<int, Unregistered>>);
static_assert(!Codable<const char*>);
static_assert(min_encoded_bytes<Point>() == 8);
static_assert(min_encoded_bytes<std::tuple<int8_t, std::string, std::monostate>>() == 5);

// Encodes `value` and decodes it back as a fresh T, requiring success.
template <class T>
T round_trip(const T& value) {
  Writer w;
  w.write(value);
  EXPECT_TRUE(w.ok());
  Reader r(w.bytes(), w.buffers());
  T out{};
  absl::Status status = decode_values(r, out);
  EXPECT_TRUE(status.ok()) << type_name<T>() << ": " << status;
  return out;
}

template <class T>
std::vector<std::byte> encode(const T& value) {
  Writer w;
  w.write(value);
  return w.bytes();
}

std::vector<std::byte> bytes_of(std::initializer_list<int> values) {
  std::vector<std::byte> out;
  for (int v : values)
    out.push_back(static_cast<std::byte>(v));
  return out;
}

// Decodes `bytes` as a T and returns the reader's status.
template <class T>
absl::Status decode_status(std::span<const std::byte> bytes) {
  Reader r(bytes);
  T out{};
  return decode_values(r, out);
}

void append_u32(std::vector<std::byte>& out, uint32_t v) {
  for (int i = 0; i < 4; ++i)
    out.push_back(static_cast<std::byte>(v >> (8 * i)));
}

TEST(CodecTest, ScalarsRoundTrip) {
  EXPECT_EQ(round_trip(true), true);
  EXPECT_EQ(round_trip(false), false);
  EXPECT_EQ(round_trip('z'), 'z');
  EXPECT_EQ(round_trip(int8_t{-128}), -128);
  EXPECT_EQ(round_trip(uint8_t{255}), 255);
  EXPECT_EQ(round_trip(int16_t{-12345}), -12345);
  EXPECT_EQ(round_trip(uint16_t{65535}), 65535);
  EXPECT_EQ(round_trip(std::numeric_limits<int32_t>::min()), std::numeric_limits<int32_t>::min());
  EXPECT_EQ(round_trip(uint32_t{0xdeadbeef}), 0xdeadbeefu);
  EXPECT_EQ(round_trip(std::numeric_limits<int64_t>::min()), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(round_trip(std::numeric_limits<uint64_t>::max()), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(round_trip(1.5f), 1.5f);
  EXPECT_EQ(round_trip(-0.0), 0.0);
  EXPECT_TRUE(std::signbit(round_trip(-0.0)));
  EXPECT_TRUE(std::isnan(round_trip(std::nan(""))));
  EXPECT_EQ(round_trip(std::numeric_limits<double>::infinity()),
            std::numeric_limits<double>::infinity());
  EXPECT_EQ(round_trip(Color::kGreen), Color::kGreen);
  EXPECT_EQ(round_trip(kNegative), kNegative);
  EXPECT_EQ(round_trip(kHuge), kHuge);
  EXPECT_EQ(round_trip(std::monostate{}), std::monostate{});
  EXPECT_EQ(round_trip(ActorId::make(3, 77)), ActorId::make(3, 77));
}

TEST(CodecTest, EncodingIsLittleEndianAndCompact) {
  EXPECT_EQ(encode(int32_t{0x01020304}), bytes_of({4, 3, 2, 1}));
  EXPECT_EQ(encode(true), bytes_of({1}));
  EXPECT_EQ(encode(Color::kRed), bytes_of({1}));
  EXPECT_EQ(encode(std::string("ab")), bytes_of({2, 0, 0, 0, 'a', 'b'}));
  EXPECT_EQ(encode(std::optional<int16_t>()), bytes_of({0}));
  EXPECT_EQ(encode(std::optional<int16_t>(7)), bytes_of({1, 7, 0}));
  EXPECT_EQ(encode(std::vector<uint16_t>{1, 2}), bytes_of({2, 0, 0, 0, 1, 0, 2, 0}));
  EXPECT_EQ(encode(std::array<uint8_t, 2>{9, 8}), bytes_of({9, 8}));
  EXPECT_EQ(encode(Point{1, 2}), bytes_of({1, 0, 0, 0, 2, 0, 0, 0}));
  EXPECT_EQ(encode(std::monostate{}), bytes_of({}));
  EXPECT_EQ(encode(absl::OkStatus()), bytes_of({0}));
  EXPECT_EQ(encode(absl::NotFoundError("x")), bytes_of({5, 1, 0, 0, 0, 'x'}));
  EXPECT_EQ(encode(ActorId{0x0102}), bytes_of({2, 1, 0, 0, 0, 0, 0, 0}));
}

TEST(CodecTest, ArithmeticVectorsAreOneBlock) {
  std::vector<float> values(1000);
  for (size_t i = 0; i < values.size(); ++i)
    values[i] = static_cast<float>(i) * 0.5f;
  std::vector<std::byte> bytes = encode(values);
  ASSERT_EQ(bytes.size(), 4 + values.size() * sizeof(float));
  EXPECT_EQ(std::memcmp(bytes.data() + 4, values.data(), values.size() * sizeof(float)), 0);
  EXPECT_EQ(round_trip(values), values);
}

TEST(CodecTest, StringsRoundTrip) {
  EXPECT_EQ(round_trip(std::string()), "");
  std::string with_nuls("a\0b\0\0c", 6);
  EXPECT_EQ(round_trip(with_nuls), with_nuls);
  std::string long_string(100000, 'q');
  EXPECT_EQ(round_trip(long_string), long_string);
}

TEST(CodecTest, SequencesRoundTrip) {
  EXPECT_EQ(round_trip(std::vector<int>{}), std::vector<int>{});
  EXPECT_EQ(round_trip(std::vector<int>{1, -2, 3}), (std::vector<int>{1, -2, 3}));
  EXPECT_EQ(round_trip(std::vector<bool>{true, false, true}),
            (std::vector<bool>{true, false, true}));
  EXPECT_EQ(round_trip(std::vector<std::string>{"", "x", std::string(3, '\0')}),
            (std::vector<std::string>{"", "x", std::string(3, '\0')}));
  std::vector<std::vector<double>> nested{{}, {1.0}, {2.0, 3.0}};
  EXPECT_EQ(round_trip(nested), nested);
  EXPECT_EQ(round_trip(std::array<int, 3>{4, 5, 6}), (std::array<int, 3>{4, 5, 6}));
  EXPECT_EQ(round_trip(std::array<std::string, 2>{"a", "bc"}),
            (std::array<std::string, 2>{"a", "bc"}));
  EXPECT_EQ(round_trip(std::array<int, 0>{}), (std::array<int, 0>{}));
  EXPECT_EQ(round_trip(std::vector<std::monostate>(5)), std::vector<std::monostate>(5));
  EXPECT_EQ(round_trip(std::vector<Color>{Color::kRed, Color::kGreen}),
            (std::vector<Color>{Color::kRed, Color::kGreen}));
}

TEST(CodecTest, MapsAndSetsRoundTrip) {
  std::map<std::string, int> ordered{{"a", 1}, {"b", 2}, {std::string("\0", 1), 3}};
  EXPECT_EQ(round_trip(ordered), ordered);
  EXPECT_EQ(round_trip(std::map<std::string, int>{}), (std::map<std::string, int>{}));
  std::unordered_map<int, std::string> hashed{{1, "one"}, {2, ""}, {-3, "minus three"}};
  EXPECT_EQ(round_trip(hashed), hashed);
  absl::flat_hash_map<std::string, std::vector<int>> flat{{"x", {1, 2}}, {"y", {}}};
  EXPECT_EQ(round_trip(flat), flat);
  std::map<int, std::map<int, std::string>> nested{{1, {{2, "b"}}}, {3, {}}};
  EXPECT_EQ(round_trip(nested), nested);
  std::set<std::string> names{"ada", "", "grace"};
  EXPECT_EQ(round_trip(names), names);
  EXPECT_EQ(round_trip(std::unordered_set<int>{3, 1, 2}), (std::unordered_set<int>{3, 1, 2}));
  EXPECT_EQ(round_trip(absl::flat_hash_set<int64_t>{7, 8}), (absl::flat_hash_set<int64_t>{7, 8}));
}

TEST(CodecTest, DecodingReplacesWhatTheTargetHeld) {
  Writer w;
  w.write(std::map<int, int>{{1, 1}});
  w.write(std::vector<int>{});
  w.write(std::optional<int>());
  Reader r(w.bytes());
  std::map<int, int> map{{5, 5}, {6, 6}};
  std::vector<int> vec{1, 2, 3};
  std::optional<int> opt = 4;
  ASSERT_TRUE(decode_values(r, map, vec, opt).ok());
  EXPECT_EQ(map, (std::map<int, int>{{1, 1}}));
  EXPECT_TRUE(vec.empty());
  EXPECT_FALSE(opt.has_value());
}

TEST(CodecTest, OptionalPairTupleRoundTrip) {
  EXPECT_EQ(round_trip(std::optional<std::string>()), std::nullopt);
  EXPECT_EQ(round_trip(std::optional<std::string>("full")), "full");
  EXPECT_EQ(round_trip(std::optional<std::optional<int>>(std::optional<int>())),
            std::optional<std::optional<int>>(std::optional<int>()));
  EXPECT_EQ(round_trip(std::pair<int, std::string>(4, "four")),
            (std::pair<int, std::string>(4, "four")));
  auto t = std::make_tuple(int8_t{-1}, std::string("s"), 2.5, std::vector<uint64_t>{9});
  EXPECT_EQ(round_trip(t), t);
  EXPECT_EQ(round_trip(std::tuple<>()), std::tuple<>());
}

TEST(CodecTest, StatusRoundTripsEveryCode) {
  EXPECT_TRUE(round_trip(absl::OkStatus()).ok());
  for (int code = 1; code <= static_cast<int>(absl::StatusCode::kUnauthenticated); ++code) {
    absl::Status s(static_cast<absl::StatusCode>(code), "why " + std::to_string(code));
    EXPECT_EQ(round_trip(s), s);
  }
  absl::Status empty_message(absl::StatusCode::kInternal, "");
  EXPECT_EQ(round_trip(empty_message), empty_message);
}

TEST(CodecTest, ActorDiedSurvivesTheTrip) {
  absl::Status died = ActorDiedError("actor-1-7 threw: boom");
  absl::Status decoded = round_trip(died);
  EXPECT_TRUE(IsActorDied(decoded));
  EXPECT_EQ(decoded.message(), "actor-1-7 threw: boom");
  EXPECT_EQ(decoded.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(absl::IsUnavailable(decoded));  // not retryable

  absl::Status plain = round_trip(absl::UnavailableError("link down"));
  EXPECT_FALSE(IsActorDied(plain));
  EXPECT_EQ(core_error(plain), CoreError::kUnavailable);
}

TEST(CodecTest, StatusOrRoundTrips) {
  absl::StatusOr<int> value = 42;
  EXPECT_EQ(*round_trip(value), 42);
  absl::StatusOr<int> error = absl::NotFoundError("no key");
  EXPECT_EQ(round_trip(error).status(), absl::NotFoundError("no key"));
  absl::StatusOr<std::vector<std::string>> strings = std::vector<std::string>{"a", "b"};
  EXPECT_EQ(*round_trip(strings), (std::vector<std::string>{"a", "b"}));
  absl::StatusOr<std::string> died = ActorDiedError("gone");
  EXPECT_TRUE(IsActorDied(round_trip(died).status()));
}

TEST(CodecTest, LargeBufferGoesOutOfBandWithoutCopy) {
  constexpr size_t kSize = size_t{4} << 20;
  Buffer buffer(kSize);
  for (size_t i = 0; i < kSize; ++i)
    buffer.data()[i] = static_cast<std::byte>(i * 7);
  const std::byte* original = buffer.data();

  Writer w;
  encode_values(w, std::string("weights"), buffer, int64_t{5});
  EXPECT_LT(w.bytes().size(), 64u);
  ASSERT_EQ(w.buffers().size(), 1u);
  EXPECT_EQ(w.buffers()[0].data(), original) << "a const Buffer is sent as a view";

  Reader r(w.bytes(), w.buffers());
  std::string name;
  Buffer decoded;
  int64_t step = 0;
  ASSERT_TRUE(decode_values(r, name, decoded, step).ok()) << r.status();
  EXPECT_EQ(decoded.data(), original);
  EXPECT_EQ(decoded.size(), kSize);
  EXPECT_EQ(name, "weights");
  EXPECT_EQ(step, 5);
  EXPECT_EQ(w.buffers()[0].data(), nullptr) << "decoding moved the buffer out";
}

TEST(CodecTest, BufferViewsHoldTheViewOwner) {
  auto message = std::make_shared<Buffer>(Buffer::copy_of(bytes_of({4, 5})));
  Writer w;
  w.set_view_owner(message);
  w.write(*message);
  ASSERT_EQ(w.buffers().size(), 1u);
  EXPECT_TRUE(w.buffers()[0].borrowed());
  EXPECT_EQ(w.buffers()[0].data(), message->data());
  std::weak_ptr<Buffer> watch = message;
  message.reset();
  w.set_view_owner(nullptr);
  ASSERT_FALSE(watch.expired()) << "the view keeps its owner alive";
  EXPECT_EQ(w.buffers()[0].bytes()[1], std::byte{5});
  w.buffers().clear();
  EXPECT_TRUE(watch.expired());
}

TEST(CodecTest, MovedBufferIsOwnedByTheWriter) {
  Buffer buffer = Buffer::copy_of(bytes_of({1, 2, 3}));
  const std::byte* original = buffer.data();
  Writer w;
  w.write(std::move(buffer));
  EXPECT_EQ(w.bytes(), bytes_of({0, 0, 0, 0}));
  ASSERT_EQ(w.buffers().size(), 1u);
  EXPECT_FALSE(w.buffers()[0].borrowed());
  EXPECT_EQ(w.buffers()[0].data(), original);

  Reader r(w.bytes(), w.buffers());
  Buffer decoded;
  ASSERT_TRUE(decode_values(r, decoded).ok());
  EXPECT_EQ(decoded.data(), original);
  EXPECT_EQ(decoded.bytes()[2], std::byte{3});
}

TEST(CodecTest, BufferIndicesAreChecked) {
  Buffer one = Buffer::copy_of(bytes_of({1}));
  std::vector<Buffer> buffers;
  buffers.push_back(std::move(one));

  std::vector<std::byte> out_of_range = bytes_of({1, 0, 0, 0});
  Reader r1(out_of_range, buffers);
  Buffer b;
  EXPECT_FALSE(decode_values(r1, b).ok());
  EXPECT_NE(r1.status().message().find("out of range"), std::string_view::npos) << r1.status();

  std::vector<std::byte> twice = bytes_of({0, 0, 0, 0, 0, 0, 0, 0});
  Reader r2(twice, buffers);
  std::pair<Buffer, Buffer> pair;
  EXPECT_FALSE(decode_values(r2, pair).ok());
  EXPECT_NE(r2.status().message().find("twice"), std::string_view::npos) << r2.status();
}

TEST(CodecTest, FieldStructsRoundTrip) {
  EXPECT_EQ(round_trip(Point{-1, 2}), (Point{-1, 2}));
  Segment s{{1, 2}, {3, 4}, "edge", {{5, 6}, {7, 8}}, 0.25};
  EXPECT_EQ(round_trip(s), s);
  Segment empty;
  EXPECT_EQ(round_trip(empty), empty);
  std::map<std::string, Segment> by_name{{"s", s}, {"e", empty}};
  EXPECT_EQ(round_trip(by_name), by_name);
  Tree tree{{Tree{}, Tree{{Tree{}, Tree{{Tree{}}}}}}};
  EXPECT_EQ(round_trip(tree), tree);
}

// A value that uses most codecs, for the truncation and corruption tests.
using Complex = std::tuple<Segment, std::map<std::string, std::vector<int16_t>>,
                           absl::StatusOr<std::string>, absl::Status, std::optional<std::set<int>>,
                           std::vector<bool>, Tree, std::array<Color, 2>, ActorId>;

Complex complex_value() {
  return Complex{Segment{{1, 2}, {3, 4}, std::string("l\0bel", 5), {{5, 6}}, 1.5},
                 {{"a", {1, 2, 3}}, {"", {}}},
                 std::string("result"),
                 ActorDiedError("actor-0-1 gone"),
                 std::set<int>{1, 9},
                 {true, false},
                 Tree{{Tree{}, Tree{{Tree{}}}}},
                 {Color::kGreen, Color::kRed},
                 ActorId::make(1, 2)};
}

TEST(CodecTest, EveryTruncationFailsCleanly) {
  std::vector<std::byte> bytes = encode(complex_value());
  ASSERT_EQ(round_trip(complex_value()), complex_value());
  for (size_t n = 0; n < bytes.size(); ++n) {
    absl::Status status = decode_status<Complex>(std::span(bytes).first(n));
    ASSERT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << "prefix " << n;
    EXPECT_TRUE(absl::StartsWith(status.message(), "malformed value: ")) << status;
  }
}

TEST(CodecTest, CorruptedBytesNeverCrash) {
  std::vector<std::byte> clean = encode(complex_value());
  std::mt19937 rng(1234);
  int rejected = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<std::byte> bytes = clean;
    int flips = 1 + static_cast<int>(rng() % 4);
    for (int i = 0; i < flips; ++i)
      bytes[rng() % bytes.size()] = static_cast<std::byte>(rng());
    absl::Status status = decode_status<Complex>(bytes);
    if (!status.ok()) {
      ++rejected;
      EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    }
  }
  EXPECT_GT(rejected, 0);
}

TEST(CodecTest, HugeCountsAreRejectedBeforeAllocating) {
  std::vector<std::byte> vector_bytes;
  append_u32(vector_bytes, 0xffffffff);
  for (int i = 0; i < 16; ++i)
    vector_bytes.push_back(std::byte{0});
  std::vector<std::byte> string_bytes = vector_bytes;

  g_largest_allocation = 0;
  g_track_allocations = true;
  Reader r(vector_bytes);
  std::vector<uint64_t> values;
  bool decoded = r.read(values);
  std::map<int32_t, int32_t> map;
  Reader map_reader(vector_bytes);
  bool map_decoded = map_reader.read(map);
  Reader string_reader(string_bytes);
  std::string s;
  bool string_decoded = string_reader.read(s);
  size_t largest_rejected = g_largest_allocation.exchange(0);
  // A control: the hook does see a genuine 16 KB vector.
  std::vector<std::byte> genuine = encode(std::vector<uint64_t>(2048, 1));
  Reader genuine_reader(genuine);
  std::vector<uint64_t> genuine_values;
  EXPECT_TRUE(genuine_reader.read(genuine_values));
  g_track_allocations = false;
  EXPECT_GE(g_largest_allocation.load(), 2048 * sizeof(uint64_t));

  EXPECT_FALSE(decoded);
  EXPECT_FALSE(map_decoded);
  EXPECT_FALSE(string_decoded);
  EXPECT_LT(largest_rejected, 1024u);
  EXPECT_NE(r.status().message().find("4294967295 elements of at least 8 bytes"),
            std::string_view::npos)
      << r.status();
  EXPECT_NE(r.status().message().find("vector<uint64>"), std::string_view::npos) << r.status();
}

TEST(CodecTest, CountsNeedRoomForEveryElement) {
  // Three strings need at least 12 bytes; 11 remain.
  std::vector<std::byte> bytes;
  append_u32(bytes, 3);
  for (int i = 0; i < 11; ++i)
    bytes.push_back(std::byte{0});
  EXPECT_FALSE(decode_status<std::vector<std::string>>(bytes).ok());
  bytes.push_back(std::byte{0});
  EXPECT_TRUE(decode_status<std::vector<std::string>>(bytes).ok());
}

TEST(CodecTest, EmptyElementCountsAreCapped) {
  std::vector<std::byte> bytes;
  append_u32(bytes, Reader::kMaxEmptyElements + 1);
  absl::Status status = decode_status<std::vector<std::monostate>>(bytes);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  bytes.clear();
  append_u32(bytes, Reader::kMaxEmptyElements);
  EXPECT_TRUE(decode_status<std::vector<std::monostate>>(bytes).ok());
}

// A chain of `depth` single-child trees: each level is a count of 1.
std::vector<std::byte> tree_chain(int depth) {
  std::vector<std::byte> bytes;
  for (int i = 0; i < depth - 1; ++i)
    append_u32(bytes, 1);
  append_u32(bytes, 0);
  return bytes;
}

TEST(CodecTest, NestingIsLimited) {
  EXPECT_TRUE(decode_status<Tree>(tree_chain(Reader::kMaxDepth)).ok());
  absl::Status too_deep = decode_status<Tree>(tree_chain(Reader::kMaxDepth + 1));
  EXPECT_EQ(too_deep.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(too_deep.message().find("nested deeper than 64"), std::string_view::npos) << too_deep;
  EXPECT_FALSE(decode_status<Tree>(tree_chain(100000)).ok());
}

TEST(CodecTest, TrailingBytesAreRejected) {
  Writer w;
  encode_values(w, int32_t{1}, std::string("x"));
  w.write(uint8_t{0});
  Reader r(w.bytes());
  int32_t i = 0;
  std::string s;
  absl::Status status = decode_values(r, i, s);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "malformed value: 1 trailing bytes after (int32, string)");
}

TEST(CodecTest, InvalidBytesAreRejected) {
  EXPECT_FALSE(decode_status<bool>(bytes_of({2})).ok());
  EXPECT_FALSE(decode_status<std::optional<int8_t>>(bytes_of({3, 0})).ok());
  absl::Status bad_code = decode_status<absl::Status>(bytes_of({17, 0, 0, 0, 0}));
  EXPECT_NE(bad_code.message().find("status code 17"), std::string_view::npos) << bad_code;
  EXPECT_FALSE(decode_status<absl::Status>(bytes_of({200, 0, 0, 0, 0})).ok());
  EXPECT_TRUE(decode_status<absl::Status>(bytes_of({255, 0, 0, 0, 0})).ok());
  // The map {1: 0, 1: 0} repeats its key.
  std::vector<std::byte> duplicate;
  append_u32(duplicate, 2);
  for (int i = 0; i < 2; ++i) {
    duplicate.push_back(std::byte{1});
    duplicate.push_back(std::byte{0});
  }
  absl::Status dup = decode_status<std::map<uint8_t, uint8_t>>(duplicate);
  EXPECT_NE(dup.message().find("duplicate key in map<uint8,uint8>"), std::string_view::npos) << dup;
  EXPECT_FALSE(decode_status<std::set<uint8_t>>(bytes_of({2, 0, 0, 0, 4, 4})).ok());
}

TEST(CodecTest, ReaderKeepsTheFirstError) {
  std::vector<std::byte> bytes = bytes_of({1, 2});
  Reader r(bytes);
  EXPECT_TRUE(r.ok());
  EXPECT_FALSE(r.fail("first"));
  EXPECT_FALSE(r.fail("second"));
  uint8_t b = 0;
  EXPECT_FALSE(r.read(b)) << "reads stop after a failure";
  EXPECT_EQ(r.status(), absl::InvalidArgumentError("malformed value: first"));
  EXPECT_EQ(r.remaining(), 2u);
}

TEST(CodecTest, TruncationSaysWhere) {
  absl::Status status = decode_status<std::pair<int8_t, int32_t>>(bytes_of({1, 2, 3}));
  EXPECT_EQ(status.message(), "malformed value: truncated at byte 1: needs 4 bytes, 2 left");
}

TEST(CodecTest, OversizedCountIsAnEncodeError) {
  Writer w;
  EXPECT_TRUE(w.write_count(5, &type_name<std::vector<int>>));
  EXPECT_TRUE(w.ok());
  EXPECT_FALSE(w.write_count(size_t{1} << 32, &type_name<std::vector<int>>));
  EXPECT_EQ(w.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(w.status().message().find("vector<int32> has 4294967296 elements"),
            std::string_view::npos)
      << w.status();
}

TEST(CodecTest, EncodeAndDecodeValuesInOrder) {
  Writer w;
  encode_values(w, 1, std::string("two"), 3.0, Point{4, 5});
  Reader r(w.bytes());
  int one = 0;
  std::string two;
  double three = 0;
  Point four;
  ASSERT_TRUE(decode_values(r, one, two, three, four).ok()) << r.status();
  EXPECT_EQ(one, 1);
  EXPECT_EQ(two, "two");
  EXPECT_EQ(three, 3.0);
  EXPECT_EQ(four, (Point{4, 5}));
  Reader empty(std::span<const std::byte>{});
  EXPECT_TRUE(decode_values(empty).ok());
}

TEST(CodecTest, TypeNames) {
  EXPECT_EQ(type_name<int32_t>(), "int32");
  EXPECT_EQ(type_name<uint64_t>(), "uint64");
  EXPECT_EQ(type_name<char>(), "char");
  EXPECT_EQ(type_name<bool>(), "bool");
  EXPECT_EQ(type_name<std::string>(), "string");
  EXPECT_EQ(type_name<const std::string&>(), "string");
  EXPECT_EQ(type_name<std::vector<float>>(), "vector<float32>");
  EXPECT_EQ((type_name<std::map<std::string, std::optional<double>>>()),
            "map<string,optional<float64>>");
  EXPECT_EQ((type_name<std::tuple<int8_t, std::array<uint16_t, 3>>>()),
            "tuple<int8,array<uint16,3>>");
  EXPECT_EQ(type_name<absl::StatusOr<ActorId>>(), "StatusOr<ActorId>");
  EXPECT_EQ(type_name<Buffer>(), "Buffer");
  EXPECT_NE(type_name<Point>().find("Point"), std::string::npos) << type_name<Point>();
  EXPECT_NE(type_name<Color>().find("Color"), std::string::npos) << type_name<Color>();
  EXPECT_NE(type_name<Unregistered>().find("Unregistered"), std::string::npos);
}

}  // namespace
}  // namespace troupe
