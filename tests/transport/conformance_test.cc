// One conformance suite for every transport (Gloo's habit): each test runs on
// inproc and tcp, and skips, saying so, what a transport cannot do.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "tests/transport/transport_test_util.h"

namespace troupe::transport::testing {
namespace {

std::string any_address(std::string_view kind) {
  static std::atomic<int> counter{0};
  if (kind == "inproc") return "inproc://conformance-" + std::to_string(counter++);
  return std::string(kind) + "://127.0.0.1:0";
}

class ConformanceTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    auto server = make_transport(GetParam(), options_with(kToken, "server"));
    auto client = make_transport(GetParam(), options_with(kToken, "client"));
    if (!server.ok() && server.status().code() == absl::StatusCode::kNotFound) {
      GTEST_SKIP() << "transport " << GetParam() << " is not available: " << server.status();
    }
    ASSERT_TRUE(server.ok() && client.ok()) << server.status() << " " << client.status();
    server_ = *std::move(server);
    client_ = *std::move(client);
  }

  // Listens with a server that echoes every frame back.
  std::string listen_echo() {
    auto listener = server_->listen(any_address(GetParam()), echo_callbacks);
    EXPECT_TRUE(listener.ok()) << listener.status();
    std::string address = (*listener)->address();
    listeners_.push_back(*std::move(listener));
    return address;
  }

  std::shared_ptr<Connection> connect(const std::string& address, Inbox& inbox) {
    auto c = client_->connect(address, inbox.callbacks(), absl::Seconds(10));
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *c : nullptr;
  }

  // Callback targets outlive the transports (members go in reverse order):
  // a transport that shuts down reports on_closed to its connections.
  Inbox& new_inbox() { return *inboxes_.emplace_back(std::make_unique<Inbox>()); }

  std::deque<std::unique_ptr<Inbox>> inboxes_;
  std::unique_ptr<Transport> server_;
  std::unique_ptr<Transport> client_;
  std::vector<std::unique_ptr<Listener>> listeners_;
};

TEST_P(ConformanceTest, EchoInOrder) {
  std::string address = listen_echo();
  Inbox& inbox = new_inbox();
  auto conn = connect(address, inbox);
  ASSERT_NE(conn, nullptr);
  constexpr int kFrames = 2000;
  for (int i = 0; i < kFrames; ++i)
    ASSERT_TRUE(conn->send(tagged(0, i)).ok());
  ASSERT_TRUE(inbox.wait_frames(kFrames));
  auto frames = inbox.take();
  for (int i = 0; i < kFrames; ++i)
    EXPECT_EQ(tag_of(frames[i]).second, static_cast<uint64_t>(i));
  EXPECT_NE(conn->peer_name().find("server"), std::string::npos) << conn->peer_name();
  EXPECT_EQ(server_->stats().connections_accepted.load(), 1u);
}

TEST_P(ConformanceTest, OrderPerSenderUnderConcurrentSenders) {
  std::string address = listen_echo();
  Inbox& inbox = new_inbox();
  auto conn = connect(address, inbox);
  ASSERT_NE(conn, nullptr);
  constexpr int kSenders = 8;
  constexpr int kPerSender = 1000;
  std::vector<std::thread> senders;
  for (int s = 0; s < kSenders; ++s) {
    senders.emplace_back([&, s] {
      for (int i = 0; i < kPerSender; ++i)
        ASSERT_TRUE(conn->send(tagged(s, i)).ok());
    });
  }
  for (auto& t : senders)
    t.join();
  ASSERT_TRUE(inbox.wait_frames(kSenders * kPerSender));
  std::map<uint64_t, uint64_t> next;
  int out_of_order = 0;
  for (const Frame& f : inbox.take()) {
    auto [sender, seq] = tag_of(f);
    if (seq != next[sender]) ++out_of_order;
    next[sender] = seq + 1;
  }
  EXPECT_EQ(out_of_order, 0);
}

// Frames are lent to on_frame: a buffer the callback moves out stays as it
// came while later frames arrive; what it leaves, the transport may reuse.
TEST_P(ConformanceTest, BuffersKeptFromLentFramesStayIntact) {
  std::string address = listen_echo();
  std::mutex mu;
  std::condition_variable arrived;
  std::vector<Buffer> kept;  // the payload of every odd frame; guarded by mu
  int seen = 0;              // guarded by mu
  auto conn = client_->connect(address,
                               ConnectionCallbacks{[&](Frame& f) {
                                                     auto [sender, seq] = tag_of(f);
                                                     std::lock_guard<std::mutex> lock(mu);
                                                     if (seq % 2 == 1) {
                                                       kept.push_back(std::move(f.buffers[1]));
                                                     }
                                                     ++seen;
                                                     arrived.notify_all();
                                                   },
                                                   [](absl::Status) {}},
                               absl::Seconds(10));
  ASSERT_TRUE(conn.ok()) << conn.status();
  constexpr int kFrames = 400;
  for (int i = 0; i < kFrames; ++i)
    ASSERT_TRUE((*conn)->send(tagged(0, i, patterned(100 + i % 3, i))).ok());
  std::unique_lock<std::mutex> lock(mu);
  arrived.wait_for(lock, std::chrono::seconds(30), [&] { return seen == kFrames; });
  ASSERT_EQ(seen, kFrames);
  ASSERT_EQ(kept.size(), size_t{kFrames / 2});
  for (size_t k = 0; k < kept.size(); ++k) {
    const size_t i = 2 * k + 1;
    EXPECT_EQ(kept[k].size(), 100 + i % 3);
    EXPECT_TRUE(matches(kept[k], i)) << "kept payload of frame " << i << " was overwritten";
  }
  lock.unlock();
  (*conn)->close();
}

TEST_P(ConformanceTest, BuffersOfEverySizeArriveIntact) {
  std::string address = listen_echo();
  Inbox& inbox = new_inbox();
  auto conn = connect(address, inbox);
  ASSERT_NE(conn, nullptr);
  const std::vector<size_t> sizes = {0, 1, 7, 8, 4097, (size_t{1} << 20) + 3, size_t{256} << 20};
  for (size_t i = 0; i < sizes.size(); ++i) {
    ASSERT_TRUE(conn->send(tagged(1, i, patterned(sizes[i], i))).ok());
  }
  ASSERT_TRUE(inbox.wait_frames(sizes.size(), absl::Seconds(120)));
  auto frames = inbox.take();
  for (size_t i = 0; i < sizes.size(); ++i) {
    ASSERT_EQ(frames[i].buffers.size(), 2u);
    EXPECT_EQ(frames[i].buffers[1].size(), sizes[i]);
    EXPECT_TRUE(matches(frames[i].buffers[1], i)) << "buffer of " << sizes[i] << " bytes corrupted";
  }
}

TEST_P(ConformanceTest, HundredsOfConcurrentConnections) {
  std::string address = listen_echo();
  constexpr int kConnections = 200;
  std::vector<Inbox*> inboxes;
  std::vector<std::shared_ptr<Connection>> conns;
  for (int i = 0; i < kConnections; ++i) {
    inboxes.push_back(&new_inbox());
    conns.push_back(connect(address, *inboxes.back()));
    ASSERT_NE(conns.back(), nullptr) << "connection " << i;
  }
  for (int i = 0; i < kConnections; ++i)
    ASSERT_TRUE(conns[i]->send(tagged(i, 0)).ok());
  for (int i = 0; i < kConnections; ++i) {
    ASSERT_TRUE(inboxes[i]->wait_frames(1)) << "connection " << i;
    EXPECT_EQ(tag_of(inboxes[i]->take().front()).first, static_cast<uint64_t>(i));
  }
  EXPECT_EQ(server_->stats().connections_accepted.load(), static_cast<uint64_t>(kConnections));
}

// Two peers that connect to each other at the same moment (each one's
// first connection to the other) both get through, and each connection
// carries its own frames.
TEST_P(ConformanceTest, CrossedConnectsBothGetThrough) {
  constexpr int kRounds = 20;
  for (int round = 0; round < kRounds; ++round) {
    auto a = make_transport(GetParam(), options_with(kToken, "a"));
    auto b = make_transport(GetParam(), options_with(kToken, "b"));
    ASSERT_TRUE(a.ok() && b.ok()) << a.status() << " " << b.status();
    auto listen_a = (*a)->listen(any_address(GetParam()), echo_callbacks);
    auto listen_b = (*b)->listen(any_address(GetParam()), echo_callbacks);
    ASSERT_TRUE(listen_a.ok() && listen_b.ok()) << listen_a.status() << " " << listen_b.status();
    Inbox& from_b = new_inbox();
    Inbox& from_a = new_inbox();
    absl::StatusOr<std::shared_ptr<Connection>> a_to_b = absl::UnknownError("not run");
    absl::StatusOr<std::shared_ptr<Connection>> b_to_a = absl::UnknownError("not run");
    std::thread other([&] {
      b_to_a = (*b)->connect((*listen_a)->address(), from_a.callbacks(), absl::Seconds(10));
    });
    a_to_b = (*a)->connect((*listen_b)->address(), from_b.callbacks(), absl::Seconds(10));
    other.join();
    ASSERT_TRUE(a_to_b.ok()) << "round " << round << ": " << a_to_b.status();
    ASSERT_TRUE(b_to_a.ok()) << "round " << round << ": " << b_to_a.status();
    ASSERT_TRUE((*a_to_b)->send(tagged(1, round)).ok());
    ASSERT_TRUE((*b_to_a)->send(tagged(2, round)).ok());
    ASSERT_TRUE(from_b.wait_frames(1)) << "round " << round;
    ASSERT_TRUE(from_a.wait_frames(1)) << "round " << round;
    EXPECT_EQ(tag_of(from_b.take().front()).first, 1u);
    EXPECT_EQ(tag_of(from_a.take().front()).first, 2u);
    (*a_to_b)->close();
    (*b_to_a)->close();
  }
}

TEST_P(ConformanceTest, OrderlyCloseReachesBothSides) {
  Inbox& server_side = new_inbox();
  auto listener = server_->listen(any_address(GetParam()), [&](std::shared_ptr<Connection>) {
    return server_side.callbacks();
  });
  ASSERT_TRUE(listener.ok());
  Inbox& inbox = new_inbox();
  auto conn = connect((*listener)->address(), inbox);
  ASSERT_NE(conn, nullptr);
  ASSERT_TRUE(conn->send(tagged(0, 0)).ok());
  conn->close();
  ASSERT_TRUE(server_side.wait_frames(1)) << "frames sent before close() arrive";
  ASSERT_TRUE(server_side.wait_closed());
  EXPECT_TRUE(server_side.close_status().ok()) << server_side.close_status();
  ASSERT_TRUE(inbox.wait_closed());
  EXPECT_TRUE(inbox.close_status().ok()) << inbox.close_status();
  EXPECT_EQ(inbox.close_count(), 1);
  EXPECT_EQ(conn->send(tagged(0, 1)).code(), absl::StatusCode::kUnavailable);
}

// A server that closes while the client's frames are still coming reads them
// as a proven peer's, buffers and all, not as a stranger's handshake: none is
// a bad frame, and the close stays orderly on both sides.
TEST_P(ConformanceTest, FramesInFlightAsTheServerClosesAreNotBadFrames) {
  Inbox& server_side = new_inbox();
  std::mutex mu;
  std::shared_ptr<Connection> accepted;  // guarded by mu
  bool closing = false;                  // guarded by mu
  auto listener = server_->listen(any_address(GetParam()), [&](std::shared_ptr<Connection> c) {
    std::lock_guard<std::mutex> lock(mu);
    accepted = std::move(c);
    ConnectionCallbacks callbacks = server_side.callbacks();
    callbacks.on_frame = [&, keep = callbacks.on_frame](Frame& f) {
      keep(f);
      std::shared_ptr<Connection> to_close;
      {
        std::lock_guard<std::mutex> inner(mu);
        if (!closing) to_close = accepted;
        closing = true;
      }
      if (to_close) to_close->close();  // at the first frame; the rest are on their way
    };
    return callbacks;
  });
  ASSERT_TRUE(listener.ok()) << listener.status();
  Inbox& inbox = new_inbox();
  auto conn = connect((*listener)->address(), inbox);
  ASSERT_NE(conn, nullptr);
  constexpr int kFrames = 64;
  for (int i = 0; i < kFrames; ++i)
    (void)conn->send(tagged(0, i, patterned(4096, i)));
  ASSERT_TRUE(inbox.wait_closed());
  EXPECT_TRUE(inbox.close_status().ok()) << inbox.close_status();
  ASSERT_TRUE(server_side.wait_closed());
  EXPECT_TRUE(server_side.close_status().ok()) << server_side.close_status();
  EXPECT_EQ(server_->stats().bad_frames.load(), 0u);
  EXPECT_GE(server_side.take().size(), 1u);
  std::lock_guard<std::mutex> lock(mu);
  accepted.reset();
}

// send() takes the frame even when it refuses it: a borrowed buffer's owner
// (a tensor a collective lent) is let go of before send() returns, not when
// the caller's frame happens to go.
TEST_P(ConformanceTest, ARefusedSendLetsGoOfTheFrame) {
  Inbox& inbox = new_inbox();
  auto conn = connect(listen_echo(), inbox);
  ASSERT_NE(conn, nullptr);
  conn->close();
  ASSERT_TRUE(inbox.wait_closed());
  auto owner = std::make_shared<std::vector<std::byte>>(64);
  Frame frame;
  frame.buffers.push_back(Buffer::borrow(owner, owner->data(), owner->size()));
  ASSERT_EQ(owner.use_count(), 2);
  EXPECT_EQ(conn->send(std::move(frame)).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(owner.use_count(), 1) << "the refused frame still holds its buffer";
}

TEST_P(ConformanceTest, WrongTokenIsRefusedBeforeAnyMessage) {
  std::atomic<int> accepted{0};
  auto listener = server_->listen(any_address(GetParam()), [&](std::shared_ptr<Connection>) {
    accepted++;
    return ConnectionCallbacks{[](Frame&) {}, [](absl::Status) {}};
  });
  ASSERT_TRUE(listener.ok());
  auto intruder = make_transport(GetParam(), options_with("not-the-token", "intruder"));
  ASSERT_TRUE(intruder.ok());
  Inbox& inbox = new_inbox();
  auto conn = (*intruder)->connect((*listener)->address(), inbox.callbacks(), absl::Seconds(10));
  ASSERT_FALSE(conn.ok());
  EXPECT_EQ(conn.status().code(), absl::StatusCode::kPermissionDenied) << conn.status();
  EXPECT_NE(conn.status().message().find("wrong cluster token"), absl::string_view::npos);
  EXPECT_EQ(accepted.load(), 0);
  EXPECT_EQ(server_->stats().connections_refused.load(), 1u);
  // The listener still serves the cluster.
  Inbox& good = new_inbox();
  EXPECT_NE(connect((*listener)->address(), good), nullptr);
  // The server runs its accept callback after sending its last handshake
  // frame, so the client may be ready a moment before it.
  absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (accepted.load() < 1 && absl::Now() < deadline)
    std::this_thread::yield();
  EXPECT_EQ(accepted.load(), 1);
}

TEST_P(ConformanceTest, ClientRefusesAServerWithoutTheToken) {
  auto impostor = make_transport(GetParam(), options_with("impostor-token", "impostor"));
  ASSERT_TRUE(impostor.ok());
  auto listener = (*impostor)->listen(any_address(GetParam()), [](std::shared_ptr<Connection>) {
    return ConnectionCallbacks{[](Frame&) {}, [](absl::Status) {}};
  });
  ASSERT_TRUE(listener.ok());
  Inbox& inbox = new_inbox();
  auto conn = client_->connect((*listener)->address(), inbox.callbacks(), absl::Seconds(10));
  EXPECT_EQ(conn.status().code(), absl::StatusCode::kPermissionDenied) << conn.status();
}

TEST_P(ConformanceTest, MissingTokenIsAnError) {
  auto none = make_transport(GetParam(), options_with(""));
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(none.status().message().find("TROUPE_TOKEN"), absl::string_view::npos);
}

TEST_P(ConformanceTest, ConnectToNothingFailsFast) {
  Inbox& inbox = new_inbox();
  std::string nowhere =
      GetParam() == "inproc" ? "inproc://nobody-listens" : GetParam() + "://127.0.0.1:1";
  auto conn = client_->connect(nowhere, inbox.callbacks(), absl::Seconds(10));
  EXPECT_EQ(conn.status().code(), absl::StatusCode::kUnavailable) << conn.status();
  auto bad = client_->connect("bogus", inbox.callbacks(), absl::Seconds(1));
  EXPECT_FALSE(bad.ok());
}

INSTANTIATE_TEST_SUITE_P(AllTransports, ConformanceTest, ::testing::Values("inproc", "tcp", "ucx"),
                         [](const auto& param_info) { return param_info.param; });

}  // namespace
}  // namespace troupe::transport::testing
