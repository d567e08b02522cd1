# Messages of the connection handshake (transport/auth.h). Every connection,
# control or data, starts with it; nothing else is processed before it ends.
@0xe0ebe6bed0f62c72;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("troupe::transport::schema");

# First frame each side sends.
struct Hello {
  protocolVersion @0 :UInt16;
  # Who is speaking, for logs only: "worker 10.0.0.7:40123".
  peerName @1 :Text;
  # 32 random bytes: the challenge the other side must answer.
  nonce @2 :Data;
}

# Proof of holding the cluster token: HMAC-SHA256 over the role, both nonces
# and both names (see auth.cc for the exact layout).
struct Proof {
  mac @0 :Data;
}

# The server's verdict on the client's proof, sent before closing on failure
# so that the client can say why.
struct Verdict {
  accepted @0 :Bool;
  reason @1 :Text;
}
