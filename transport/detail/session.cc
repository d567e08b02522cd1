#include "transport/detail/session.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"
#include "transport/message.h"
#include "transport/schema/handshake.capnp.h"

namespace troupe::transport::detail {
namespace {

constexpr uint16_t kProtocolVersion = 1;
constexpr size_t kMaxPeerNameBytes = 256;

template <class Array>
bool copy_data(capnp::Data::Reader data, Array& out) {
  if (data.size() != out.size()) return false;
  std::memcpy(out.data(), data.begin(), out.size());
  return true;
}

}  // namespace

Session::Session(Role role, TransportOptions options, std::shared_ptr<TransportStats> stats,
                 std::string channel_name)
    : role_(role),
      options_(std::move(options)),
      stats_(std::move(stats)),
      channel_name_(std::move(channel_name)),
      my_nonce_(random_nonce()) {
  if (role_ == Role::kServer) {
    counted_handshaking_.store(true);
    stats_->handshaking.fetch_add(1, std::memory_order_relaxed);
  }
}

Session::~Session() {
  end_handshaking();
}

void Session::end_handshaking() {
  if (counted_handshaking_.exchange(false)) {
    stats_->handshaking.fetch_sub(1, std::memory_order_relaxed);
  }
}

bool Session::open() const {
  return state_.load(std::memory_order_acquire) == State::kOpen;
}

bool Session::handshaking() const {
  return state_.load(std::memory_order_acquire) == State::kHandshaking;
}

std::string Session::peer_name() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (peer_name_.empty()) return channel_name_;
  return absl::StrCat(peer_name_, " (", channel_name_, ")");
}

void Session::send_control(FrameKind kind, Buffer message) {
  Frame f;
  f.kind = kind;
  f.message = std::move(message);
  static_cast<void>(write_frame(std::move(f)));  // failure surfaces as a closed channel
}

void Session::start() {
  capnp::MallocMessageBuilder builder;
  auto hello = builder.initRoot<schema::Hello>();
  hello.setProtocolVersion(kProtocolVersion);
  hello.setPeerName(options_.local_name);
  hello.setNonce(kj::arrayPtr(my_nonce_.data(), my_nonce_.size()));
  send_control(FrameKind::kHello, to_buffer(builder));
}

absl::Status Session::wait_ready(absl::Time deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  while (state_ == State::kHandshaking) {
    if (ready_cv_.wait_until(lock, absl::ToChronoTime(deadline)) == std::cv_status::timeout &&
        state_ == State::kHandshaking) {
      lock.unlock();
      fail(absl::DeadlineExceededError(
          absl::StrCat("no handshake with ", channel_name_, " within the deadline")));
      lock.lock();
      break;
    }
  }
  return state_ == State::kOpen ? absl::OkStatus() : close_reason_;
}

void Session::on_frame_received(Frame& frame) {
  stats_->frames_received.fetch_add(1, std::memory_order_relaxed);
  // Read without the lock (as before, it may move on once read): states only
  // advance, and the branches below that change it do so under mu_.
  State state = state_.load(std::memory_order_acquire);
  if (state == State::kClosed) return;
  if (state == State::kOpen || state == State::kClosing) {
    if (frame.kind == FrameKind::kData) {
      if (callbacks_.on_frame) callbacks_.on_frame(frame);
      return;
    }
    if (frame.kind == FrameKind::kClose) {
      ConnectionCallbacks callbacks;
      {
        std::lock_guard<std::mutex> lock(mu_);
        state_ = State::kClosed;
        close_reason_ =
            absl::UnavailableError(absl::StrCat("connection to ", peer_name_, " was closed"));
        if (closed_reported_) return;
        closed_reported_ = true;
      }
      shutdown_channel();
      if (callbacks_.on_closed) callbacks_.on_closed(absl::OkStatus());
      return;
    }
    on_bad_frame(absl::InvalidArgumentError(
        absl::StrCat("unexpected ", to_string(frame.kind), " frame after the handshake")));
    return;
  }
  // Handshaking: only handshake frames, in order.
  switch (frame.kind) {
    case FrameKind::kHello:
      handle_hello(frame);
      return;
    case FrameKind::kProof:
      handle_proof(frame);
      return;
    case FrameKind::kVerdict:
      handle_verdict(frame);
      return;
    default:
      stats_->connections_refused.fetch_add(1, std::memory_order_relaxed);
      fail(absl::PermissionDeniedError(
          absl::StrCat("refused ", channel_name_, ": it sent a ", to_string(frame.kind),
                       " frame before authenticating (no cluster token?)")));
      return;
  }
}

void Session::handle_hello(const Frame& frame) {
  if (got_hello_) {
    on_bad_frame(absl::InvalidArgumentError("second Hello"));
    return;
  }
  std::string name;
  try {
    auto reader = read_message(frame.message, kHandshakeLimits);
    auto hello = reader.getRoot<schema::Hello>();
    if (hello.getProtocolVersion() != kProtocolVersion) {
      fail(absl::FailedPreconditionError(
          absl::StrCat(channel_name_, " speaks protocol version ", hello.getProtocolVersion(),
                       "; this build speaks ", kProtocolVersion, " (mixed troupe versions?)")));
      return;
    }
    if (!copy_data(hello.getNonce(), their_nonce_)) {
      on_bad_frame(absl::InvalidArgumentError("Hello nonce has the wrong size"));
      return;
    }
    auto peer = hello.getPeerName();
    name.assign(peer.cStr(), std::min(peer.size(), kMaxPeerNameBytes));
  } catch (const kj::Exception& e) {
    on_bad_frame(
        absl::InvalidArgumentError(absl::StrCat("bad Hello: ", e.getDescription().cStr())));
    return;
  }
  got_hello_ = true;
  {
    std::lock_guard<std::mutex> lock(mu_);
    peer_name_ = std::move(name);
  }
  if (role_ == Role::kClient) {
    Mac proof = compute_proof(options_.token, Role::kClient, their_nonce_, my_nonce_);
    capnp::MallocMessageBuilder builder;
    builder.initRoot<schema::Proof>().setMac(kj::arrayPtr(proof.data(), proof.size()));
    send_control(FrameKind::kProof, to_buffer(builder));
  }
}

void Session::handle_proof(const Frame& frame) {
  bool expected = role_ == Role::kServer ? got_hello_ : got_verdict_;
  if (!expected) {
    on_bad_frame(absl::InvalidArgumentError("Proof out of order"));
    return;
  }
  Mac mac{};
  try {
    auto reader = read_message(frame.message, kHandshakeLimits);
    if (!copy_data(reader.getRoot<schema::Proof>().getMac(), mac)) {
      on_bad_frame(absl::InvalidArgumentError("Proof has the wrong size"));
      return;
    }
  } catch (const kj::Exception& e) {
    on_bad_frame(
        absl::InvalidArgumentError(absl::StrCat("bad Proof: ", e.getDescription().cStr())));
    return;
  }
  if (role_ == Role::kServer) {
    Mac want = compute_proof(options_.token, Role::kClient, my_nonce_, their_nonce_);
    capnp::MallocMessageBuilder builder;
    auto verdict = builder.initRoot<schema::Verdict>();
    if (!proofs_equal(mac, want)) {
      stats_->connections_refused.fetch_add(1, std::memory_order_relaxed);
      verdict.setAccepted(false);
      verdict.setReason("wrong cluster token");
      send_control(FrameKind::kVerdict, to_buffer(builder));
      fail(absl::PermissionDeniedError(
          absl::StrCat("refused ", peer_name(), ": wrong cluster token")));
      return;
    }
    // Open (reading with the full limits) before the Verdict goes, for the
    // peer's frames may follow it at once; but the layer above hears of the
    // connection, and may send on it, only after our Proof.
    if (!mark_open()) return;
    verdict.setAccepted(true);
    send_control(FrameKind::kVerdict, to_buffer(builder));
    Mac mine = compute_proof(options_.token, Role::kServer, their_nonce_, my_nonce_);
    capnp::MallocMessageBuilder proof;
    proof.initRoot<schema::Proof>().setMac(kj::arrayPtr(mine.data(), mine.size()));
    send_control(FrameKind::kProof, to_buffer(proof));
    announce_open();
    return;
  }
  Mac want = compute_proof(options_.token, Role::kServer, my_nonce_, their_nonce_);
  if (!proofs_equal(mac, want)) {
    fail(absl::PermissionDeniedError(absl::StrCat(
        peer_name(), " could not prove it holds the cluster token (a different cluster?)")));
    return;
  }
  become_open();
}

void Session::handle_verdict(const Frame& frame) {
  if (role_ != Role::kClient || got_verdict_) {
    on_bad_frame(absl::InvalidArgumentError("unexpected Verdict"));
    return;
  }
  try {
    auto reader = read_message(frame.message, kHandshakeLimits);
    auto verdict = reader.getRoot<schema::Verdict>();
    if (!verdict.getAccepted()) {
      fail(absl::PermissionDeniedError(
          absl::StrCat(peer_name(), " refused the connection: ", verdict.getReason().cStr())));
      return;
    }
  } catch (const kj::Exception& e) {
    on_bad_frame(
        absl::InvalidArgumentError(absl::StrCat("bad Verdict: ", e.getDescription().cStr())));
    return;
  }
  got_verdict_ = true;
}

void Session::become_open() {
  if (mark_open()) announce_open();
}

bool Session::mark_open() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ != State::kHandshaking) return false;
    state_ = State::kOpen;
  }
  proven_ = true;
  end_handshaking();
  return true;
}

void Session::announce_open() {
  ready_cv_.notify_all();
  if (role_ == Role::kServer) {
    stats_->connections_accepted.fetch_add(1, std::memory_order_relaxed);
    if (on_accept_) callbacks_ = on_accept_(shared_from_this());
  }
}

void Session::on_bad_frame(const absl::Status& why) {
  stats_->bad_frames.fetch_add(1, std::memory_order_relaxed);
  fail(absl::InvalidArgumentError(absl::StrCat("dropped ", peer_name(), ": ", why.message())));
}

void Session::fail(absl::Status why, bool warn, bool drop) {
  bool report = false;
  bool was_handshaking = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ == State::kClosed) {
      if (drop) {
        spdlog::debug("transport: {} must end at once ({}), but it was closed already ({})",
                      peer_name_.empty() ? channel_name_ : peer_name_, std::string(why.message()),
                      std::string(close_reason_.message()));
      }
      return;
    }
    was_handshaking = state_ == State::kHandshaking;
    report = !was_handshaking && !closed_reported_;
    closed_reported_ = closed_reported_ || report;
    state_ = State::kClosed;
    close_reason_ = why;
  }
  end_handshaking();
  ready_cv_.notify_all();
  if (warn && (role_ == Role::kServer || !was_handshaking)) {
    spdlog::warn("transport: {}", std::string(why.message()));
  } else {
    spdlog::debug("transport: {}", std::string(why.message()));
  }
  if (drop) {
    drop_channel();
  } else {
    shutdown_channel();
  }
  if (report && callbacks_.on_closed) callbacks_.on_closed(why);
}

void Session::on_channel_closed(absl::Status why) {
  absl::Status reason;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ == State::kClosed) return;
    if (state_ == State::kClosing) {
      state_ = State::kClosed;
      close_reason_ =
          absl::UnavailableError(absl::StrCat("connection to ", peer_name_, " was closed"));
      if (closed_reported_) return;
      closed_reported_ = true;
      reason = absl::OkStatus();
    } else {
      reason = absl::UnavailableError(absl::StrCat(
          state_ == State::kHandshaking ? absl::StrCat(kClosedDuringHandshake, " with ")
                                        : std::string("connection lost to "),
          peer_name_.empty() ? channel_name_ : peer_name_, ": ", why.message()));
      bool was_open = state_ == State::kOpen;
      state_ = State::kClosed;
      close_reason_ = reason;
      if (!was_open) {
        ready_cv_.notify_all();
        return;
      }
      closed_reported_ = true;
    }
  }
  ready_cv_.notify_all();
  if (callbacks_.on_closed) callbacks_.on_closed(reason);
}

absl::Status Session::send(Frame&& frame) {
  if (state_.load(std::memory_order_acquire) != State::kOpen) {
    absl::Status refused;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (state_ != State::kOpen) {
        refused =
            close_reason_.ok() ? absl::UnavailableError("connection is closing") : close_reason_;
      }
    }
    if (!refused.ok()) {
      // Let go of outside the lock: a borrowed buffer's owner may run anything.
      Frame dropped = std::move(frame);
      return refused;
    }
  }
  frame.kind = FrameKind::kData;
  absl::Status s = write_frame(std::move(frame));
  if (s.ok()) {
    stats_->frames_sent.fetch_add(1, std::memory_order_relaxed);
  } else {
    Frame dropped = std::move(frame);  // what write_frame left, let go of as promised
  }
  return s;
}

void Session::close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ != State::kOpen) return;
    state_ = State::kClosing;
  }
  send_control(FrameKind::kClose, Buffer());
  shutdown_channel();
}

}  // namespace troupe::transport::detail
