// Building and reading the Cap'n Proto part of a frame.
#pragma once

#include <capnp/message.h>
#include <capnp/serialize.h>

#include "transport/buffer.h"
#include "transport/frame.h"

namespace troupe::transport {

// Serialises `builder` (unpacked) into a Buffer for Frame::message.
Buffer to_buffer(capnp::MessageBuilder& builder);

// Reads a message previously checked by validate_message(). The reader
// borrows `message`, which must outlive it.
inline capnp::FlatArrayMessageReader read_message(const Buffer& message,
                                                  const FrameLimits& limits = {}) {
  capnp::ReaderOptions options;
  options.traversalLimitInWords = limits.traversal_limit_words;
  options.nestingLimit = limits.nesting_limit;
  return capnp::FlatArrayMessageReader(
      kj::ArrayPtr<const capnp::word>(reinterpret_cast<const capnp::word*>(message.data()),
                                      message.size() / sizeof(capnp::word)),
      options);
}

}  // namespace troupe::transport
