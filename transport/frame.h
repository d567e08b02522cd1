// The wire format. Every frame on every transport is
//
//   header       32 bytes, little-endian (FrameHeader below)
//   lengths      buffer_count x u64: the size of each raw buffer
//   message      message_bytes: a Cap'n Proto message (flat array, unpacked)
//   buffers      the raw buffers, back to back, never copied into the message
//
// Decoding is bounded by FrameLimits: the header is checked before anything
// is allocated, the Cap'n Proto message is traversed once under a traversal
// and nesting limit, and an unknown kind or version is rejected. A frame that
// fails any check is an error for its connection only.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "transport/buffer.h"

namespace troupe::transport {

constexpr uint32_t kFrameMagic = 0x45505254;  // "TRPE" as little-endian bytes
constexpr uint8_t kWireVersion = 1;
constexpr size_t kFrameHeaderBytes = 32;

enum class FrameKind : uint8_t {
  kHello = 1,    // handshake: Hello
  kProof = 2,    // handshake: Proof
  kVerdict = 3,  // handshake: Verdict
  kData = 4,     // an application message (its schema belongs to the layer above)
  kClose = 5,    // orderly close; no message
};
bool is_known(FrameKind kind);
std::string to_string(FrameKind kind);

struct FrameLimits {
  uint64_t max_frame_bytes = uint64_t{1} << 30;  // header + lengths + message + buffers
  uint32_t max_message_bytes = 64u << 20;        // the Cap'n Proto part
  uint16_t max_buffers = 64;
  uint64_t traversal_limit_words = 8u << 20;  // Cap'n Proto reader limits
  int nesting_limit = 64;
};

// What a peer that has not proven the token yet may send: the handshake's
// Hello and Proof, a few hundred bytes each, and nothing out of band. A
// connection holds at most this much before it is authenticated.
inline constexpr FrameLimits kHandshakeLimits{.max_frame_bytes = 4096,
                                              .max_message_bytes = 4096,
                                              .max_buffers = 0,
                                              .traversal_limit_words = 512,
                                              .nesting_limit = 8};

struct FrameHeader {
  FrameKind kind = FrameKind::kData;
  uint16_t buffer_count = 0;
  uint32_t message_bytes = 0;  // a multiple of 8 (Cap'n Proto words)
  uint64_t buffers_bytes = 0;  // sum of the buffer lengths

  uint64_t lengths_bytes() const { return uint64_t{buffer_count} * 8; }
  uint64_t total_bytes() const {
    return kFrameHeaderBytes + lengths_bytes() + message_bytes + buffers_bytes;
  }
};

// A frame's buffer lengths, in order (inline for the usual few buffers).
using LengthTable = absl::InlinedVector<uint64_t, 4>;

// A decoded or to-be-sent frame. `message` holds Cap'n Proto words (the
// Buffer is 64-byte aligned, as the reader needs 8).
struct Frame {
  FrameKind kind = FrameKind::kData;
  Buffer message;
  absl::InlinedVector<Buffer, 2> buffers;  // inline: most frames carry one or two

  uint64_t wire_bytes() const;
};

// Makes `frame` a frame of `kind` with a message of `message_bytes` and
// buffers of `lengths`, their bytes unspecified, in the storage it already
// holds where that fits (Buffer::reuse) and in new storage where not.
void refit(Frame& frame, FrameKind kind, size_t message_bytes, std::span<const uint64_t> lengths);

// Encoding.
std::array<std::byte, kFrameHeaderBytes> encode_header(const FrameHeader& h);
FrameHeader header_of(const Frame& frame);
// The lengths table for `frame`'s buffers.
LengthTable encode_lengths(const Frame& frame);
// The whole frame as one contiguous byte string (tests, fuzzing, inproc).
std::vector<std::byte> encode_frame(const Frame& frame);

// Decoding, in the order the bytes arrive. Errors are InvalidArgument (bad
// bytes) or ResourceExhausted (over a limit), with what was wrong.
absl::StatusOr<FrameHeader> decode_header(std::span<const std::byte> bytes,
                                          const FrameLimits& limits);
// Reads the lengths table into `lengths` and checks it against the header
// and limits. (Into a table the caller has, not a returned one: on the
// receive path of small frames that copy was a tenth of a frame's delivery.)
absl::Status decode_lengths(const FrameHeader& h, std::span<const std::byte> bytes,
                            const FrameLimits& limits, LengthTable& lengths);
// Traverses the Cap'n Proto message under the limits; OK if well-formed.
absl::Status validate_message(const Buffer& message, const FrameLimits& limits);
// All of the above on a complete frame in memory. Extra trailing bytes are an error.
absl::StatusOr<Frame> decode_frame(std::span<const std::byte> bytes, const FrameLimits& limits);

}  // namespace troupe::transport
