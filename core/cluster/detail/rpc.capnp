# Actor calls between nodes: one Envelope per Data frame. Arguments and
# results are Codec-encoded (core/codec.h); their out-of-band buffers (tensors,
# large payloads) ride as the frame's raw buffers, never inside this message.
@0xf14ae90370c2722b;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("troupe::cluster::schema");

struct Envelope {
  union {
    call @0 :Call;
    reply @1 :Reply;
  }
}

struct Call {
  # Names the reply; 0 for a tell, which gets none.
  callId @0 :UInt64;
  # The target ActorId and the method's stable id (hash of "Class::method").
  target @1 :UInt64;
  method @2 :UInt64;
  args @3 :Data;
}

struct Reply {
  callId @0 :UInt64;
  # The call's Status, then its value when OK.
  result @1 :Data;
}
