#include "transport/message.h"

#include <cstring>

namespace troupe::transport {

Buffer to_buffer(capnp::MessageBuilder& builder) {
  kj::Array<capnp::word> words = capnp::messageToFlatArray(builder);
  kj::ArrayPtr<const kj::byte> bytes = words.asBytes();
  Buffer out(bytes.size());
  if (bytes.size() > 0) std::memcpy(out.data(), bytes.begin(), bytes.size());
  return out;
}

}  // namespace troupe::transport
