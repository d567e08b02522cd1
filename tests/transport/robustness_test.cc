// What a listener does with hostile or broken peers: raw bytes that are
// not frames, frames that break the limits, peers that never authenticate,
// and peers that die mid-transfer. Each costs only its own connection.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "tests/transport/transport_test_util.h"
#include "transport/address.h"
#include "transport/direct_io.h"

extern char** environ;

namespace troupe::transport::testing {
namespace {

// A plain socket to 127.0.0.1:port, for sending arbitrary bytes.
class RawClient {
 public:
  // From `source` (a loopback address, "127.0.0.2": another peer host as
  // the listener sees it), or the kernel's choice.
  explicit RawClient(uint16_t port, const char* source = nullptr) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (source != nullptr) {
      sockaddr_in from{};
      from.sin_family = AF_INET;
      ::inet_pton(AF_INET, source, &from.sin_addr);
      static_cast<void>(::bind(fd_, reinterpret_cast<sockaddr*>(&from), sizeof(from)));
    }
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  }
  ~RawClient() { ::close(fd_); }
  bool connected() const { return connected_; }
  void send(const void* data, size_t n) { static_cast<void>(::send(fd_, data, n, MSG_NOSIGNAL)); }
  void send(const std::vector<std::byte>& bytes) { send(bytes.data(), bytes.size()); }
  // True if the server closes the connection within `timeout` (reading and
  // discarding whatever it sent first, e.g. its Hello).
  bool closed_by_server(absl::Duration timeout) {
    absl::Time deadline = absl::Now() + timeout;
    char buf[4096];
    while (absl::Now() < deadline) {
      pollfd p{fd_, POLLIN, 0};
      int ready =
          ::poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(deadline - absl::Now())) + 1);
      if (ready <= 0) continue;
      ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n <= 0) return true;
    }
    return false;
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
};

class TcpRobustnessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TransportOptions o = options_with(kToken, "server");
    o.handshake_timeout = absl::Milliseconds(300);
    o.limits.max_frame_bytes = 64 << 20;
    server_ = *make_transport("tcp", o);
    client_ = *make_transport("tcp", options_with(kToken, "client"));
    auto listener = server_->listen("tcp://127.0.0.1:0", echo_callbacks);
    ASSERT_TRUE(listener.ok());
    listener_ = *std::move(listener);
    port_ = parse_address(listener_->address(), "tcp")->port;
    // A well-behaved connection that must keep working throughout.
    auto good = client_->connect(listener_->address(), good_inbox_.callbacks(), absl::Seconds(10));
    ASSERT_TRUE(good.ok()) << good.status();
    good_ = *good;
  }

  void expect_good_connection_still_works() { expect_echo(*good_, good_inbox_, echoes_); }

  std::vector<std::byte> header_bytes(FrameHeader h) {
    auto a = encode_header(h);
    return std::vector<std::byte>(a.begin(), a.end());
  }

  // Callback targets are declared first so that they outlive the transports.
  Inbox& new_inbox() { return *inboxes_.emplace_back(std::make_unique<Inbox>()); }
  std::deque<std::unique_ptr<Inbox>> inboxes_;
  Inbox good_inbox_;
  std::unique_ptr<Transport> server_;
  std::unique_ptr<Transport> client_;
  std::unique_ptr<Listener> listener_;
  std::shared_ptr<Connection> good_;
  uint16_t port_ = 0;
  uint64_t echoes_ = 0;
};

TEST_F(TcpRobustnessTest, GarbageIsDroppedAndCounted) {
  RawClient raw(port_);
  ASSERT_TRUE(raw.connected());
  std::string junk = "GET / HTTP/1.1\r\nHost: troupe\r\n\r\n";
  raw.send(junk.data(), junk.size());
  EXPECT_TRUE(raw.closed_by_server(absl::Seconds(10)));
  EXPECT_GE(server_->stats().bad_frames.load(), 1u);
  expect_good_connection_still_works();
}

TEST_F(TcpRobustnessTest, WrongVersionIsDropped) {
  RawClient raw(port_);
  auto bytes = header_bytes(FrameHeader{FrameKind::kHello, 0, 0, 0});
  bytes[4] = std::byte{9};
  raw.send(bytes);
  EXPECT_TRUE(raw.closed_by_server(absl::Seconds(10)));
  expect_good_connection_still_works();
}

TEST_F(TcpRobustnessTest, OversizedFrameIsDroppedBeforeAllocation) {
  RawClient raw(port_);
  raw.send(header_bytes(FrameHeader{FrameKind::kData, 1, 0, uint64_t{1} << 40}));
  EXPECT_TRUE(raw.closed_by_server(absl::Seconds(10)));
  EXPECT_GE(server_->stats().bad_frames.load(), 1u);
  expect_good_connection_still_works();
}

TEST_F(TcpRobustnessTest, TruncatedFrameThenHangUp) {
  {
    RawClient raw(port_);
    raw.send(header_bytes(FrameHeader{FrameKind::kHello, 0, 1024, 0}));
    raw.send("only a few bytes", 16);
  }  // closes mid-frame
  expect_good_connection_still_works();
}

TEST_F(TcpRobustnessTest, DataBeforeAuthenticationIsRefused) {
  RawClient raw(port_);
  Frame f = tagged(1, 1);
  raw.send(encode_frame(f));
  EXPECT_TRUE(raw.closed_by_server(absl::Seconds(10)));
  // Its out-of-band buffers alone exceed the handshake's limits.
  EXPECT_GE(server_->stats().bad_frames.load(), 1u);
  expect_good_connection_still_works();
}

TEST_F(TcpRobustnessTest, SilentPeerIsDroppedAfterHandshakeTimeout) {
  RawClient raw(port_);
  absl::Time start = absl::Now();
  EXPECT_TRUE(raw.closed_by_server(absl::Seconds(10)));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(250));
  expect_good_connection_still_works();
}

TEST_F(TcpRobustnessTest, BeforeTheTokenOnlyAHandshakeSizedFrameIsAccepted) {
  // A Hello claiming a 64 KiB message: the limit with a proven token would
  // take it, the handshake's (4 KiB) does not.
  RawClient raw(port_);
  raw.send(header_bytes(FrameHeader{FrameKind::kHello, 0, 64 << 10, 0}));
  EXPECT_TRUE(raw.closed_by_server(absl::Seconds(10)));
  EXPECT_GE(server_->stats().bad_frames.load(), 1u);
  // Out-of-band buffers are refused too.
  RawClient buffers(port_);
  buffers.send(header_bytes(FrameHeader{FrameKind::kHello, 1, 0, 8}));
  EXPECT_TRUE(buffers.closed_by_server(absl::Seconds(10)));
  expect_good_connection_still_works();
}

// Peers that connect and say nothing, beyond what a listener holds for
// unauthenticated peers, close the oldest of them: a peer with the token,
// which arrives last, always gets through, and a flood from one address
// never closes another address's connections (TransportOptions).
class TcpFloodTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // The default handshake timeout: the flood stays for the whole test.
    server_ = *make_transport("tcp", options_with(kToken, "server"));
    client_ = *make_transport("tcp", options_with(kToken, "client"));
    auto listener = server_->listen("tcp://127.0.0.1:0", echo_callbacks);
    ASSERT_TRUE(listener.ok());
    listener_ = *std::move(listener);
    port_ = parse_address(listener_->address(), "tcp")->port;
  }

  // `n` silent connections from `source`, each accepted by the server.
  void flood(int n, const char* source) {
    const uint64_t before = accepted();
    for (int i = 0; i < n; ++i) {
      silent_.push_back(std::make_unique<RawClient>(port_, source));
      ASSERT_TRUE(silent_.back()->connected());
    }
    // Until the server has accepted (and counted or shed) every one.
    absl::Time deadline = absl::Now() + absl::Seconds(20);
    while (absl::Now() < deadline && accepted() < before + n)
      absl::SleepFor(absl::Milliseconds(5));
  }
  // Until `value()` is `want` (false after 10 s): the I/O thread counts a
  // connection it accepts, and one it sheds, a moment after the sum below moves.
  static bool settles_at(const std::function<int64_t()>& value, int64_t want) {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (value() != want && absl::Now() < deadline)
      absl::SleepFor(absl::Milliseconds(5));
    return value() == want;
  }
  int64_t handshaking() const { return server_->stats().handshaking.load(); }
  int64_t shed() const { return static_cast<int64_t>(server_->stats().connections_shed.load()); }
  // Connections accepted and not authenticated: held or shed.
  uint64_t accepted() const {
    return static_cast<uint64_t>(server_->stats().handshaking.load()) +
           server_->stats().connections_shed.load();
  }

  Inbox& new_inbox() { return *inboxes_.emplace_back(std::make_unique<Inbox>()); }
  std::deque<std::unique_ptr<Inbox>> inboxes_;
  std::unique_ptr<Transport> server_;
  std::unique_ptr<Transport> client_;
  std::unique_ptr<Listener> listener_;
  std::vector<std::unique_ptr<RawClient>> silent_;
  uint16_t port_ = 0;
};

TEST_F(TcpFloodTest, SilentPeersMakeRoomForAPeerWithTheToken) {
  const TransportOptions defaults;
  flood(defaults.max_handshaking + 6, "127.0.0.1");
  // One address holds at most its share; the oldest were closed unheard.
  EXPECT_TRUE(settles_at([&] { return handshaking(); }, defaults.max_handshaking_per_source))
      << handshaking();
  EXPECT_TRUE(settles_at([&] { return shed(); },
                         defaults.max_handshaking + 6 - defaults.max_handshaking_per_source))
      << shed();
  EXPECT_TRUE(silent_.front()->closed_by_server(absl::Seconds(5)));
  // Every peer with the token gets through while the flood holds on.
  for (int i = 0; i < 5; ++i) {
    Inbox& inbox = new_inbox();
    auto c = client_->connect(listener_->address(), inbox.callbacks(), absl::Seconds(10));
    ASSERT_TRUE(c.ok()) << "connection " << i << ": " << c.status();
    uint64_t sequence = 0;
    expect_echo(**c, inbox, sequence);
  }
  // Each made room by closing the oldest silent peer, not the newest.
  EXPECT_FALSE(silent_.back()->closed_by_server(absl::Milliseconds(100)));
}

TEST_F(TcpFloodTest, AFloodFromOneAddressClosesOnlyItsOwnConnections) {
  const TransportOptions defaults;
  RawClient other(port_, "127.0.0.2");  // another host, still in its handshake
  ASSERT_TRUE(other.connected());
  flood(4 * defaults.max_handshaking, "127.0.0.3");
  EXPECT_GE(
      server_->stats().connections_shed.load(),
      static_cast<uint64_t>(4 * defaults.max_handshaking - defaults.max_handshaking_per_source));
  EXPECT_FALSE(other.closed_by_server(absl::Milliseconds(100)));
  // Many addresses together fill the listener: then the oldest of all makes room.
  const char* sources[] = {"127.0.0.4", "127.0.0.5", "127.0.0.6", "127.0.0.7"};
  for (const char* source : sources)
    flood(defaults.max_handshaking_per_source, source);
  EXPECT_TRUE(settles_at([&] { return handshaking(); }, defaults.max_handshaking)) << handshaking();
  EXPECT_TRUE(other.closed_by_server(absl::Seconds(5)));
  Inbox& inbox = new_inbox();
  auto c = client_->connect(listener_->address(), inbox.callbacks(), absl::Seconds(10));
  ASSERT_TRUE(c.ok()) << c.status();
}

// Starts tests/transport/transport_peer with `args`; returns its pid and, if
// `out` is given, a pipe from its stdout. Its stdin is a pipe the test keeps
// open (`*keepalive`): the peer serves until it closes.
pid_t spawn_peer(std::vector<std::string> args, FILE** out, int* keepalive) {
  int out_fds[2] = {-1, -1};
  int in_fds[2] = {-1, -1};
  EXPECT_EQ(::pipe(in_fds), 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in_fds[0], STDIN_FILENO);
  posix_spawn_file_actions_addclose(&actions, in_fds[1]);
  if (out != nullptr) {
    EXPECT_EQ(::pipe(out_fds), 0);
    posix_spawn_file_actions_adddup2(&actions, out_fds[1], STDOUT_FILENO);
    posix_spawn_file_actions_addclose(&actions, out_fds[0]);
  }
  args.insert(args.begin(), TROUPE_TRANSPORT_PEER);
  std::vector<char*> argv;
  for (auto& a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  EXPECT_EQ(posix_spawn(&pid, TROUPE_TRANSPORT_PEER, &actions, nullptr, argv.data(), environ), 0);
  posix_spawn_file_actions_destroy(&actions);
  ::close(in_fds[0]);
  *keepalive = in_fds[1];
  if (out != nullptr) {
    ::close(out_fds[1]);
    *out = ::fdopen(out_fds[0], "r");
  }
  return pid;
}

void kill_and_reap(pid_t pid, int keepalive) {
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ::close(keepalive);
}

// A peer process killed with SIGKILL in the middle of a transfer, on every
// transport that crosses processes: the survivor gets Unavailable within a
// deadline, never a hang.
class PeerKilledTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    auto t = make_transport(GetParam(), options_with(kToken, "survivor"));
    if (!t.ok() && t.status().code() == absl::StatusCode::kNotFound) {
      GTEST_SKIP() << "transport " << GetParam() << " is not available: " << t.status();
    }
    ASSERT_TRUE(t.ok()) << t.status();
    transport_ = *std::move(t);
  }
  Inbox& new_inbox() { return *inboxes_.emplace_back(std::make_unique<Inbox>()); }

  std::deque<std::unique_ptr<Inbox>> inboxes_;
  std::unique_ptr<Transport> transport_;
};

constexpr absl::Duration kDetection = absl::Seconds(5);

TEST_P(PeerKilledTest, SenderKilledMidTransferFailsTheReceiver) {
  Inbox& doomed = new_inbox();
  auto listener =
      transport_->listen(GetParam() + "://127.0.0.1:0",
                         [&](std::shared_ptr<Connection>) { return doomed.callbacks(); });
  ASSERT_TRUE(listener.ok()) << listener.status();
  int keepalive = -1;
  pid_t pid = spawn_peer({"send", GetParam(), (*listener)->address(), kToken}, nullptr, &keepalive);
  ASSERT_TRUE(doomed.wait_frames(1, absl::Seconds(30))) << "the peer never delivered a frame";
  absl::Time killed_at = absl::Now();
  kill_and_reap(pid, keepalive);
  ASSERT_TRUE(doomed.wait_closed(kDetection)) << "no error within " << kDetection << " of SIGKILL";
  EXPECT_LT(absl::Now() - killed_at, kDetection);
  EXPECT_EQ(doomed.close_status().code(), absl::StatusCode::kUnavailable) << doomed.close_status();
}

TEST_P(PeerKilledTest, ServerKilledMidTransferFailsTheClient) {
  FILE* out = nullptr;
  int keepalive = -1;
  pid_t pid = spawn_peer({"serve", GetParam(), kToken}, &out, &keepalive);
  char line[256] = {0};
  ASSERT_NE(std::fgets(line, sizeof(line), out), nullptr) << "peer did not report its address";
  std::fclose(out);
  std::string address(line);
  while (!address.empty() && (address.back() == '\n' || address.back() == '\r'))
    address.pop_back();
  Inbox& doomed = new_inbox();
  auto conn = transport_->connect(address, doomed.callbacks(), absl::Seconds(10));
  ASSERT_TRUE(conn.ok()) << conn.status();
  Frame big;
  big.buffers.push_back(patterned(size_t{64} << 20, 3));
  ASSERT_TRUE((*conn)->send(std::move(big)).ok());
  ASSERT_TRUE(doomed.wait_frames(1, absl::Seconds(30)));  // echoed once: the peer is live
  // Sent from memory the test lends (as a collective sends from its
  // gradients): the transport must let go of it once the peer is gone.
  auto lent = std::make_shared<std::atomic<int>>(0);
  std::vector<std::byte> memory(size_t{64} << 20, std::byte{4});
  Frame again;
  for (int i = 0; i < 4; ++i) {
    lent->fetch_add(1);
    std::shared_ptr<const void> owner(memory.data(), [lent](const void*) { lent->fetch_sub(1); });
    again.buffers.push_back(Buffer::borrow(std::move(owner), memory.data() + (i << 24), 1 << 24));
  }
  ASSERT_TRUE((*conn)->send(std::move(again)).ok());
  absl::Time killed_at = absl::Now();
  kill_and_reap(pid, keepalive);
  ASSERT_TRUE(doomed.wait_closed(kDetection)) << "no error within " << kDetection << " of SIGKILL";
  EXPECT_LT(absl::Now() - killed_at, kDetection);
  absl::Time deadline = absl::Now() + kDetection;
  while (lent->load() > 0 && absl::Now() < deadline)
    absl::SleepFor(absl::Milliseconds(5));
  EXPECT_EQ(lent->load(), 0) << "the transport still holds buffers of a send to the killed peer";
  EXPECT_EQ(doomed.close_status().code(), absl::StatusCode::kUnavailable) << doomed.close_status();
  EXPECT_EQ((*conn)->send(tagged(0, 0)).code(), absl::StatusCode::kUnavailable);
}

// A frame cut short by its sender's death gives back, once the connection
// drops, the buffer placement lent for it - even while its owner keeps the
// connection (a communicator keeps a lost member's until it is re-formed,
// and a collective waits for the buffers it lent before it returns).
TEST_P(PeerKilledTest, AFrameCutShortGivesBackThePlacedBuffer) {
  if (GetParam() != "ucx") GTEST_SKIP() << "only ucx places incoming buffers";
  struct Lent {
    std::atomic<int> out{0};
    std::atomic<pid_t> sender{-1};
    std::atomic<bool> placed{false};
    std::vector<std::byte> target;
  };
  auto lent = std::make_shared<Lent>();
  Inbox& doomed = new_inbox();
  std::mutex mu;
  std::shared_ptr<Connection> kept;  // held to the end, as a communicator holds a lost member's
  auto listener =
      transport_->listen(GetParam() + "://127.0.0.1:0", [&](std::shared_ptr<Connection> c) {
        std::lock_guard<std::mutex> lock(mu);
        kept = std::move(c);
        return doomed.callbacks();
      });
  ASSERT_TRUE(listener.ok()) << listener.status();
  int keepalive = -1;
  lent->sender =
      spawn_peer({"send", GetParam(), (*listener)->address(), kToken}, nullptr, &keepalive);
  absl::Time deadline = absl::Now() + absl::Seconds(30);
  DirectIo* direct_io = nullptr;
  while (direct_io == nullptr && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
    std::lock_guard<std::mutex> lock(mu);
    direct_io = dynamic_cast<DirectIo*>(kept.get());
  }
  if (direct_io != nullptr) {
    direct_io->set_placement([lent](std::span<const Buffer>, size_t bytes) -> Buffer {
      if (lent->placed.exchange(true)) return Buffer();
      // The first large buffer is about to be pulled from the sender: it dies first.
      ::kill(lent->sender.load(), SIGKILL);
      int status = 0;
      ::waitpid(lent->sender.load(), &status, 0);
      lent->target.resize(bytes);
      lent->out.fetch_add(1);
      std::shared_ptr<const void> owner(lent->target.data(),
                                        [lent](const void*) { lent->out.fetch_sub(1); });
      return Buffer::borrow(std::move(owner), lent->target.data(), bytes);
    });
  }
  bool closed = doomed.wait_closed(absl::Seconds(30));
  if (!lent->placed) kill_and_reap(lent->sender, keepalive);
  ::close(keepalive);
  ASSERT_NE(direct_io, nullptr) << "no connection from the sender";
  ASSERT_TRUE(lent->placed) << "no buffer of the sender's was placed";
  ASSERT_TRUE(closed) << "the connection to the killed sender never closed";
  doomed.take();  // a frame that did arrive whole would give its buffers back here
  deadline = absl::Now() + kDetection;
  while (lent->out.load() > 0 && absl::Now() < deadline)
    absl::SleepFor(absl::Milliseconds(5));
  EXPECT_EQ(lent->out.load(), 0) << "the buffer lent for the cut frame is still held";
}

INSTANTIATE_TEST_SUITE_P(CrossProcessTransports, PeerKilledTest, ::testing::Values("tcp", "ucx"),
                         [](const auto& param_info) { return param_info.param; });

}  // namespace
}  // namespace troupe::transport::testing
