// Helpers for the transport conformance suite.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "transport/connection.h"

namespace troupe::transport::testing {

inline constexpr char kToken[] = "conformance-test-token";

inline TransportOptions options_with(std::string token, std::string name = "test") {
  TransportOptions o;
  o.token = std::move(token);
  o.local_name = std::move(name);
  o.handshake_timeout = absl::Seconds(5);
  return o;
}

// The transports that suites parameterised over transports run on: every
// kind make_transport() knows. A case whose transport this build or machine
// lacks skips itself (see transport_unavailable).
inline const std::vector<std::string> kTransports = {"inproc", "tcp", "ucx"};

// Those of kTransports that connect processes: all but inproc, which
// reaches only its own.
inline std::vector<std::string> transports_between_processes() {
  std::vector<std::string> kinds;
  for (const std::string& kind : kTransports) {
    if (kind != "inproc") kinds.push_back(kind);
  }
  return kinds;
}

// Why a transport of `kind` cannot be made here, or "" when it can: the
// reason make_transport() gives for a kind it does not have (NotFound; ucx
// where UCX cannot initialise). Any other failure is left to the test.
inline std::string transport_unavailable(const std::string& kind) {
  auto transport = make_transport(kind, options_with(kToken, "probe"));
  if (absl::IsNotFound(transport.status())) return std::string(transport.status().message());
  return "";
}

// Callbacks for an accepted connection that sends every frame back. Holds the
// connection weakly: a connection's callbacks must not keep it alive.
inline ConnectionCallbacks echo_callbacks(const std::shared_ptr<Connection>& c) {
  std::weak_ptr<Connection> weak = c;
  return ConnectionCallbacks{[weak](Frame& f) {
                               if (auto conn = weak.lock())
                                 static_cast<void>(conn->send(std::move(f)));
                             },
                             [](absl::Status) {}};
}

// A byte pattern that depends on (seed, index), to check buffers arrive intact.
inline std::byte pattern(uint64_t seed, uint64_t i) {
  return static_cast<std::byte>((seed * 131 + i * 7 + (i >> 11)) & 0xff);
}
inline Buffer patterned(size_t size, uint64_t seed) {
  Buffer b(size);
  for (size_t i = 0; i < size; ++i)
    b.data()[i] = pattern(seed, i);
  return b;
}
inline bool matches(const Buffer& b, uint64_t seed) {
  for (size_t i = 0; i < b.size(); ++i) {
    if (b.data()[i] != pattern(seed, i)) return false;
  }
  return true;
}

// A frame carrying (sender, sequence) in a 16-byte buffer, plus an optional payload.
inline Frame tagged(uint64_t sender, uint64_t sequence, Buffer payload = Buffer()) {
  Frame f;
  Buffer tag(16);
  std::memcpy(tag.data(), &sender, 8);
  std::memcpy(tag.data() + 8, &sequence, 8);
  f.buffers.push_back(std::move(tag));
  f.buffers.push_back(std::move(payload));
  return f;
}
inline std::pair<uint64_t, uint64_t> tag_of(const Frame& f) {
  uint64_t sender = 0, sequence = 0;
  if (!f.buffers.empty() && f.buffers[0].size() == 16) {
    std::memcpy(&sender, f.buffers[0].data(), 8);
    std::memcpy(&sequence, f.buffers[0].data() + 8, 8);
  }
  return {sender, sequence};
}

// Collects frames and the close status of one connection; waits with deadlines.
class Inbox {
 public:
  ConnectionCallbacks callbacks() {
    return ConnectionCallbacks{[this](Frame& f) { push(std::move(f)); },
                               [this](absl::Status s) { closed(std::move(s)); }};
  }
  void push(Frame f) {
    std::lock_guard<std::mutex> lock(mu_);
    frames_.push_back(std::move(f));
    cv_.notify_all();
  }
  void closed(absl::Status s) {
    std::lock_guard<std::mutex> lock(mu_);
    ++close_count_;
    close_status_ = std::move(s);
    cv_.notify_all();
  }
  // Waits for `n` frames in all; returns false at the deadline.
  bool wait_frames(size_t n, absl::Duration timeout = absl::Seconds(60)) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_until(lock, absl::ToChronoTime(absl::Now() + timeout),
                          [&] { return frames_.size() >= n; });
  }
  bool wait_closed(absl::Duration timeout = absl::Seconds(30)) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_until(lock, absl::ToChronoTime(absl::Now() + timeout),
                          [&] { return close_count_ > 0; });
  }
  std::deque<Frame> take() {
    std::lock_guard<std::mutex> lock(mu_);
    return std::move(frames_);
  }
  absl::Status close_status() {
    std::lock_guard<std::mutex> lock(mu_);
    return close_status_;
  }
  int close_count() {
    std::lock_guard<std::mutex> lock(mu_);
    return close_count_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Frame> frames_;
  int close_count_ = 0;
  absl::Status close_status_;
};

// Sends tagged frame `sequence` on `conn`, whose peer echoes, and expects it
// back in `inbox` (emptied first); increments `sequence`.
inline void expect_echo(Connection& conn, Inbox& inbox, uint64_t& sequence) {
  inbox.take();
  ASSERT_TRUE(conn.send(tagged(9, sequence)).ok());
  ASSERT_TRUE(inbox.wait_frames(1, absl::Seconds(10)));
  EXPECT_EQ(tag_of(inbox.take().front()).second, sequence);
  ++sequence;
}

}  // namespace troupe::transport::testing
