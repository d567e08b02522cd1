#include "transport/frame.h"

#include <capnp/any.h>
#include <capnp/message.h>
#include <capnp/serialize.h>
#include <kj/exception.h>

#include <bit>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace troupe::transport {
namespace {

static_assert(std::endian::native == std::endian::little, "the wire format is little-endian");

// Header layout: offsets into the 32 bytes.
constexpr size_t kMagicAt = 0;          // u32
constexpr size_t kVersionAt = 4;        // u8
constexpr size_t kKindAt = 5;           // u8
constexpr size_t kBufferCountAt = 6;    // u16
constexpr size_t kMessageBytesAt = 8;   // u32
constexpr size_t kReservedAt = 12;      // u32, zero
constexpr size_t kBuffersBytesAt = 16;  // u64
constexpr size_t kReserved2At = 24;     // u64, zero

template <class T>
T load(std::span<const std::byte> bytes, size_t at) {
  T v;
  std::memcpy(&v, bytes.data() + at, sizeof(T));
  return v;
}
template <class T>
void store(std::byte* out, size_t at, T v) {
  std::memcpy(out + at, &v, sizeof(T));
}

}  // namespace

bool is_known(FrameKind kind) {
  switch (kind) {
    case FrameKind::kHello:
    case FrameKind::kProof:
    case FrameKind::kVerdict:
    case FrameKind::kData:
    case FrameKind::kClose:
      return true;
  }
  return false;
}

std::string to_string(FrameKind kind) {
  switch (kind) {
    case FrameKind::kHello:
      return "Hello";
    case FrameKind::kProof:
      return "Proof";
    case FrameKind::kVerdict:
      return "Verdict";
    case FrameKind::kData:
      return "Data";
    case FrameKind::kClose:
      return "Close";
  }
  return absl::StrCat("unknown(", static_cast<int>(kind), ")");
}

void refit(Frame& frame, FrameKind kind, size_t message_bytes, std::span<const uint64_t> lengths) {
  auto fit = [](Buffer& b, size_t size) {
    if (size == 0) {
      if (b.data() != nullptr || b.borrowed()) b = Buffer();  // an empty one stays as it is
    } else if (!b.reuse(size)) {
      b = Buffer(size);
    }
  };
  frame.kind = kind;
  fit(frame.message, message_bytes);
  frame.buffers.resize(lengths.size());
  for (size_t i = 0; i < lengths.size(); ++i)
    fit(frame.buffers[i], lengths[i]);
}

uint64_t Frame::wire_bytes() const {
  return header_of(*this).total_bytes();
}

FrameHeader header_of(const Frame& frame) {
  FrameHeader h;
  h.kind = frame.kind;
  h.buffer_count = static_cast<uint16_t>(frame.buffers.size());
  h.message_bytes = static_cast<uint32_t>(frame.message.size());
  for (const Buffer& b : frame.buffers)
    h.buffers_bytes += b.size();
  return h;
}

std::array<std::byte, kFrameHeaderBytes> encode_header(const FrameHeader& h) {
  std::array<std::byte, kFrameHeaderBytes> out{};
  store<uint32_t>(out.data(), kMagicAt, kFrameMagic);
  store<uint8_t>(out.data(), kVersionAt, kWireVersion);
  store<uint8_t>(out.data(), kKindAt, static_cast<uint8_t>(h.kind));
  store<uint16_t>(out.data(), kBufferCountAt, h.buffer_count);
  store<uint32_t>(out.data(), kMessageBytesAt, h.message_bytes);
  store<uint32_t>(out.data(), kReservedAt, 0);
  store<uint64_t>(out.data(), kBuffersBytesAt, h.buffers_bytes);
  store<uint64_t>(out.data(), kReserved2At, 0);
  return out;
}

LengthTable encode_lengths(const Frame& frame) {
  LengthTable lengths;
  lengths.reserve(frame.buffers.size());
  for (const Buffer& b : frame.buffers)
    lengths.push_back(b.size());
  return lengths;
}

std::vector<std::byte> encode_frame(const Frame& frame) {
  FrameHeader h = header_of(frame);
  std::vector<std::byte> out(h.total_bytes());
  auto header = encode_header(h);
  std::memcpy(out.data(), header.data(), header.size());
  size_t at = kFrameHeaderBytes;
  for (uint64_t len : encode_lengths(frame)) {
    store<uint64_t>(out.data(), at, len);
    at += 8;
  }
  if (!frame.message.empty()) {
    std::memcpy(out.data() + at, frame.message.data(), frame.message.size());
    at += frame.message.size();
  }
  for (const Buffer& b : frame.buffers) {
    if (!b.empty()) std::memcpy(out.data() + at, b.data(), b.size());
    at += b.size();
  }
  return out;
}

absl::StatusOr<FrameHeader> decode_header(std::span<const std::byte> bytes,
                                          const FrameLimits& limits) {
  if (bytes.size() < kFrameHeaderBytes) {
    return absl::InvalidArgumentError(absl::StrCat("truncated frame header: ", bytes.size(), " of ",
                                                   kFrameHeaderBytes, " bytes"));
  }
  uint32_t magic = load<uint32_t>(bytes, kMagicAt);
  if (magic != kFrameMagic) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad frame magic 0x", absl::Hex(magic), " (not a troupe peer?)"));
  }
  uint8_t version = load<uint8_t>(bytes, kVersionAt);
  if (version != kWireVersion) {
    return absl::InvalidArgumentError(absl::StrCat("unsupported wire version ", version,
                                                   " (this build speaks ", kWireVersion, ")"));
  }
  FrameHeader h;
  h.kind = static_cast<FrameKind>(load<uint8_t>(bytes, kKindAt));
  if (!is_known(h.kind)) return absl::InvalidArgumentError("unknown frame " + to_string(h.kind));
  if (load<uint32_t>(bytes, kReservedAt) != 0 || load<uint64_t>(bytes, kReserved2At) != 0) {
    return absl::InvalidArgumentError("frame header reserved bytes are not zero");
  }
  h.buffer_count = load<uint16_t>(bytes, kBufferCountAt);
  h.message_bytes = load<uint32_t>(bytes, kMessageBytesAt);
  h.buffers_bytes = load<uint64_t>(bytes, kBuffersBytesAt);
  if (h.message_bytes % 8 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("message length ", h.message_bytes, " is not a whole number of words"));
  }
  if (h.buffer_count > limits.max_buffers) {
    return absl::ResourceExhaustedError(
        absl::StrCat("frame has ", h.buffer_count, " buffers; the limit is ", limits.max_buffers));
  }
  if (h.message_bytes > limits.max_message_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "frame message of ", h.message_bytes, " bytes; the limit is ", limits.max_message_bytes));
  }
  // Each term is bounded, so this sum cannot overflow before the comparison.
  if (h.buffers_bytes > limits.max_frame_bytes || h.total_bytes() > limits.max_frame_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("frame of ", h.buffers_bytes,
                                                     " buffer bytes is over the limit of ",
                                                     limits.max_frame_bytes, " bytes"));
  }
  if (h.buffer_count == 0 && h.buffers_bytes != 0) {
    return absl::InvalidArgumentError("frame declares buffer bytes but no buffers");
  }
  return h;
}

absl::Status decode_lengths(const FrameHeader& h, std::span<const std::byte> bytes,
                            const FrameLimits& limits, LengthTable& lengths) {
  if (bytes.size() < h.lengths_bytes()) {
    return absl::InvalidArgumentError("truncated buffer length table");
  }
  lengths.resize(h.buffer_count);
  uint64_t sum = 0;
  for (size_t i = 0; i < lengths.size(); ++i) {
    lengths[i] = load<uint64_t>(bytes, i * 8);
    if (lengths[i] > limits.max_frame_bytes) {
      return absl::ResourceExhaustedError(
          absl::StrCat("buffer ", i, " of ", lengths[i], " bytes is over the limit"));
    }
    sum += lengths[i];  // at most 64 x 2^30-ish: no overflow
  }
  if (sum != h.buffers_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("buffer lengths add up to ", sum, " but the header says ", h.buffers_bytes));
  }
  return absl::OkStatus();
}

absl::Status validate_message(const Buffer& message, const FrameLimits& limits) {
  if (message.empty()) return absl::OkStatus();
  if (message.size() % sizeof(capnp::word) != 0) {
    return absl::InvalidArgumentError("message is not a whole number of words");
  }
  kj::ArrayPtr<const capnp::word> words(reinterpret_cast<const capnp::word*>(message.data()),
                                        message.size() / sizeof(capnp::word));
  capnp::ReaderOptions options;
  options.traversalLimitInWords = limits.traversal_limit_words;
  options.nestingLimit = limits.nesting_limit;
  try {
    capnp::FlatArrayMessageReader reader(words, options);
    if (reader.getEnd() != words.end()) {
      return absl::InvalidArgumentError("bytes after the end of the Cap'n Proto message");
    }
    // Visits every object reachable from the root, checking every pointer.
    reader.getRoot<capnp::AnyPointer>().targetSize();
  } catch (const kj::Exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed Cap'n Proto message: ", e.getDescription().cStr()));
  }
  return absl::OkStatus();
}

absl::StatusOr<Frame> decode_frame(std::span<const std::byte> bytes, const FrameLimits& limits) {
  absl::StatusOr<FrameHeader> h = decode_header(bytes, limits);
  if (!h.ok()) return h.status();
  if (bytes.size() < h->total_bytes()) {
    return absl::InvalidArgumentError(
        absl::StrCat("truncated frame: ", bytes.size(), " of ", h->total_bytes(), " bytes"));
  }
  if (bytes.size() > h->total_bytes()) {
    return absl::InvalidArgumentError(
        absl::StrCat(bytes.size() - h->total_bytes(), " stray bytes after the frame"));
  }
  size_t at = kFrameHeaderBytes;
  LengthTable lengths;
  if (absl::Status s = decode_lengths(*h, bytes.subspan(at), limits, lengths); !s.ok()) return s;
  at += h->lengths_bytes();

  Frame frame;
  frame.kind = h->kind;
  frame.message = Buffer::copy_of(bytes.subspan(at, h->message_bytes));
  at += h->message_bytes;
  if (absl::Status s = validate_message(frame.message, limits); !s.ok()) return s;
  for (uint64_t len : lengths) {
    frame.buffers.push_back(Buffer::copy_of(bytes.subspan(at, len)));
    at += len;
  }
  return frame;
}

}  // namespace troupe::transport
