// What travels through a mailbox. Internal to core.
#pragma once

#include <string_view>

#include "absl/status/status.h"
#include "core/detail/ref_counted.h"

namespace troupe {
class Writer;
class Reader;
}  // namespace troupe

namespace troupe::detail {

class FutureStateBase;

class Message {
 public:
  Message* next_ = nullptr;  // mailbox link

  // Runs in the receiving actor's context on `instance` (the actor object).
  // On return the message has disposed of itself. It may throw; then it has
  // not disposed of itself, and the actor fails and calls reject() on it.
  virtual void deliver(void* instance) = 0;
  // The message will never run: completes whatever waits on it with `why`
  // and disposes of itself.
  virtual void reject(const absl::Status& why) = 0;
  // "Class::method" for calls, empty for internal messages.
  virtual std::string_view method_name() const { return {}; }

  // For a call to an actor in another process (core/cluster/detail/remote_actor.h):
  // the method's stable id, whether the caller waits for a reply, the
  // arguments encoded (Unimplemented if one has no Codec), and, for calls,
  // completion from the encoded reply, after which it has disposed of itself.
  // A Buffer argument moves into `out`; the Buffers inside other arguments
  // are views a call's message keeps alive until its reply, and move into
  // `out` with a tell's (ArgsLifetime), so that the frame can be sent
  // however long it takes.
  virtual uint64_t method_id() const { return 0; }
  virtual bool wants_reply() const { return false; }
  virtual absl::Status encode_args(Writer& out);
  virtual void complete_remote(Reader& in);
  // The state of the caller's future, which the reply completes; null for
  // messages without a reply.
  virtual FutureStateBase* reply_state() { return nullptr; }

 protected:
  virtual ~Message() = default;
};

// Something that accepts internal messages (continuations): an actor.
class MessageTarget : public RefCounted {
 public:
  // Enqueues `m` without back-pressure; rejects it if the target is gone.
  virtual void post_internal(Message* m) = 0;
};

// The actor whose message the calling thread is running, or null.
MessageTarget* current_actor();

}  // namespace troupe::detail
