// The transport interface: authenticated, ordered, message-oriented
// connections that carry Frames. One implementation per subfolder (inproc/,
// tcp/, ucx/), chosen by make_transport().
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "transport/frame.h"

namespace troupe::transport {

// What a connection delivers. Called on the transport's I/O thread, one call
// at a time per connection, in arrival order. Keep them short: they hold up
// every connection of that transport.
//
// A frame is lent to on_frame for the call. What the callback keeps it moves
// out - a buffer, or the whole frame; the rest stays with the transport,
// which lays a later frame into that storage. So a connection whose frames
// have one shape (a stream of small calls, a collective's messages) receives
// them without allocating.
struct ConnectionCallbacks {
  std::function<void(Frame&)> on_frame;         // Data frames, after authentication
  std::function<void(absl::Status)> on_closed;  // exactly once; OK for an orderly close
};

class Connection {
 public:
  virtual ~Connection() = default;

  // Queues a Data frame. Its buffers are sent without being copied into the
  // message; frames arrive in the order they were sent. Thread-safe. The
  // transport takes what it needs of `frame`: what the frame still holds
  // when this returns (a small frame's bytes may have been copied out, its
  // storage left) is the caller's to reuse or drop, and on failure the
  // frame's buffers are let go of before this returns. By reference, not by
  // value: a frame is handed through every layer below this one, and each
  // move of a frame costs about what the shared-memory hop of a small one
  // does.
  // Errors: Unavailable once the connection is closed, with the reason.
  virtual absl::Status send(Frame&& frame) = 0;

  // Closes the connection: queued frames are sent first, then both sides see
  // on_closed(OK). Idempotent.
  virtual void close() = 0;

  // Ends the connection now: frames not yet sent are dropped, and the
  // buffers of those in flight released once the transport lets go of them
  // (a peer that stopped reading holds nothing of ours). This side sees
  // on_closed(why) if it had not closed already. For a peer known to be
  // gone or hung. Idempotent.
  virtual void abort(absl::Status why) = 0;

  // The peer's name from its Hello ("worker host:port"), for logs.
  virtual std::string peer_name() const = 0;
};

// Counters a transport keeps, for logs and /metrics.
struct TransportStats {
  std::atomic<uint64_t> connections_accepted{0};
  std::atomic<uint64_t> connections_refused{0};  // failed authentication
  std::atomic<uint64_t> bad_frames{0};           // malformed, oversized, unexpected
  std::atomic<uint64_t> frames_sent{0};
  std::atomic<uint64_t> frames_received{0};
  // Accepted connections not authenticated yet, and those closed unheard to
  // make room for newer ones (TransportOptions::max_handshaking).
  std::atomic<int64_t> handshaking{0};
  std::atomic<uint64_t> connections_shed{0};
};

struct TransportOptions {
  std::string token;                  // the cluster token; required
  std::string local_name = "troupe";  // sent in Hello, shown in the peer's logs
  FrameLimits limits;                 // once authenticated; before, kHandshakeLimits
  // The local address this process serves on ("10.0.0.5"); UCX then uses
  // only that address's network interface (UCX_NET_DEVICES, unless the
  // environment sets it), instead of listening on every one. Empty or
  // 0.0.0.0: every interface.
  std::string host;
  absl::Duration handshake_timeout = absl::Seconds(10);
  // Accepted connections still in their handshake, at most, and at most
  // max_handshaking_per_source of them from one peer address. A connection
  // beyond either bound closes the oldest one it counts against, unheard:
  // a peer that proves the token does so within a round trip of arriving,
  // so it is the newest and gets through, while peers that connect and say
  // nothing are the oldest and make room (sshd's MaxStartups, with the
  // oldest dropped instead of the newest). With handshake_timeout, this
  // bounds what unauthenticated peers hold: max_handshaking x
  // kHandshakeLimits. A peer closed this way retries within its connect
  // timeout (connect() below), so load never fails a handshake that would
  // have succeeded.
  int max_handshaking = 64;
  int max_handshaking_per_source = 32;
};

// Called once per accepted, authenticated connection; returns the callbacks
// for it. Runs on the I/O thread.
using AcceptCallback = std::function<ConnectionCallbacks(std::shared_ptr<Connection>)>;

class Listener {
 public:
  virtual ~Listener() = default;
  // Where peers connect: "tcp://127.0.0.1:41234", "inproc://name", ...
  virtual std::string address() const = 0;
  // Stops accepting; established connections stay open.
  virtual void close() = 0;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual std::string_view name() const = 0;

  // Accepts connections on `address` (transport-specific; "tcp://127.0.0.1:0"
  // picks a free port). Errors: InvalidArgument, Unavailable (in use).
  virtual absl::StatusOr<std::unique_ptr<Listener>> listen(std::string_view address,
                                                           AcceptCallback on_accept) = 0;

  // Connects to a listener and authenticates both ways. Returns once the
  // connection is ready. A listener that closes the connection during the
  // handshake (to make room: TransportOptions::max_handshaking) is tried
  // again until `timeout`. Errors: Unavailable (unreachable, or closed
  // during every handshake), PermissionDenied (token rejected, by either
  // side), DeadlineExceeded.
  virtual absl::StatusOr<std::shared_ptr<Connection>> connect(std::string_view address,
                                                              ConnectionCallbacks callbacks,
                                                              absl::Duration timeout) = 0;

  virtual const TransportStats& stats() const = 0;
};

// "inproc", "tcp" or "ucx". NotFound for an unknown or unavailable kind.
absl::StatusOr<std::unique_ptr<Transport>> make_transport(std::string_view kind,
                                                          TransportOptions options);

}  // namespace troupe::transport
