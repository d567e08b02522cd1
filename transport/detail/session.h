// The transport-neutral half of a connection: the authentication handshake,
// the connection state, and the user's callbacks. A transport subclasses
// Session and supplies the I/O: write_frame() and shutdown_channel() going
// out, on_frame_received() and on_channel_closed() coming in.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "transport/auth.h"
#include "transport/connection.h"

namespace troupe::transport::detail {

// How a connection that the peer closed before the handshake ended is
// reported (wait_ready's Unavailable): a connect may try again.
inline constexpr char kClosedDuringHandshake[] = "connection closed during the handshake";

class Session : public Connection, public std::enable_shared_from_this<Session> {
 public:
  // `channel_name` names the underlying channel in logs ("tcp 127.0.0.1:5555").
  // Options are copied and stats shared: a session may outlive its transport.
  Session(Role role, TransportOptions options, std::shared_ptr<TransportStats> stats,
          std::string channel_name);
  ~Session() override;

  // Sends our Hello. Call once the channel can carry frames.
  void start();

  // Client side: blocks until the handshake succeeds or fails, or `deadline`.
  absl::Status wait_ready(absl::Time deadline);
  // Client side: the callbacks for Data frames and close, set before start().
  void set_callbacks(ConnectionCallbacks callbacks) { callbacks_ = std::move(callbacks); }
  // Server side: called on the I/O thread once the peer is authenticated; its
  // result becomes this connection's callbacks.
  void set_accept(AcceptCallback on_accept) { on_accept_ = std::move(on_accept); }

  // For the transport, on its I/O thread, one call at a time.
  // The frame is lent, as to ConnectionCallbacks::on_frame.
  void on_frame_received(Frame& frame);
  void on_channel_closed(absl::Status why);
  // A frame that failed to decode: counted, logged, and the connection dropped.
  void on_bad_frame(const absl::Status& why);
  // Ends the connection at once (Connection::abort; also the transport's own
  // handshake timeout or shutdown): callbacks see `why`.
  void abort(absl::Status why) override { fail(std::move(why), /*warn=*/false, /*drop=*/true); }

  bool open() const;
  // Not authenticated yet, and not ended either.
  bool handshaking() const;

  // Connection.
  absl::Status send(Frame&& frame) override;
  void close() override;
  std::string peer_name() const override;

 protected:
  // Queues `frame` for writing, in order, taking it (or, on failure,
  // perhaps leaving it be: send() lets go of it then). Thread-safe.
  virtual absl::Status write_frame(Frame&& frame) = 0;
  // Closes the channel once queued frames are written; the transport then
  // calls on_channel_closed(). Thread-safe, idempotent.
  virtual void shutdown_channel() = 0;
  // Closes the channel at once, dropping queued frames and letting go of
  // those being written; the transport then calls on_channel_closed().
  // Thread-safe, idempotent. By default as shutdown_channel().
  virtual void drop_channel() { shutdown_channel(); }

  const TransportOptions& options() const { return options_; }
  // The limits for the next frame: kHandshakeLimits while an accepted peer
  // has not proven the token, options().limits after, closing included (its
  // last frames are a proven peer's). A connection we made trusts the peer
  // we chose, whose frames may follow its Proof at once. I/O thread only.
  const FrameLimits& frame_limits() const {
    return role_ == Role::kServer && !proven_ ? kHandshakeLimits : options_.limits;
  }

 private:
  enum class State { kHandshaking, kOpen, kClosing, kClosed };

  void handle_hello(const Frame& frame);
  void handle_proof(const Frame& frame);
  void handle_verdict(const Frame& frame);
  void send_control(FrameKind kind, Buffer message);
  void become_open();    // mark_open(), then announce_open()
  bool mark_open();      // handshaking -> open; false if it was not handshaking
  void announce_open();  // wakes wait_ready(); the server side runs on_accept
  // Ends the handshake or the connection with `why`, logged as a warning
  // when `warn` (refusals, bad frames) and at debug level otherwise; the
  // channel is dropped (drop_channel) when `drop`, else shut down in order.
  void fail(absl::Status why, bool warn = true, bool drop = false);

  const Role role_;
  const TransportOptions options_;
  const std::shared_ptr<TransportStats> stats_;
  const std::string channel_name_;
  const Nonce my_nonce_;

  // Handshake progress (I/O thread only).
  bool got_hello_ = false;
  bool got_verdict_ = false;
  bool proven_ = false;  // the peer proved the token and the session opened
  Nonce their_nonce_{};

  ConnectionCallbacks callbacks_;
  AcceptCallback on_accept_;

  mutable std::mutex mu_;  // guards the fields below; state_ is also read without it
  std::condition_variable ready_cv_;
  std::atomic<State> state_{State::kHandshaking};
  absl::Status close_reason_;  // why it is not open (once it is not)
  std::string peer_name_;
  bool closed_reported_ = false;
  std::atomic<bool> counted_handshaking_{false};  // in stats_->handshaking
  void end_handshaking();
};

}  // namespace troupe::transport::detail
