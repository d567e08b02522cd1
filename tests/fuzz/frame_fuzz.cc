// libFuzzer target for the frame decoder: any byte string must decode to a
// frame or to an error, never crash, hang or over-allocate; a frame that
// decodes must re-encode to exactly the same bytes.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>

#include "transport/frame.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  troupe::transport::FrameLimits limits;
  limits.max_frame_bytes = 1 << 20;
  limits.max_message_bytes = 1 << 16;
  limits.traversal_limit_words = 1 << 14;
  std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  absl::StatusOr<troupe::transport::Frame> frame = troupe::transport::decode_frame(bytes, limits);
  if (!frame.ok()) return 0;
  std::vector<std::byte> again = troupe::transport::encode_frame(*frame);
  if (again.size() != size || std::memcmp(again.data(), data, size) != 0) std::abort();
  return 0;
}
