// Ranking advertised endpoints and connecting to the best one that answers.
#include "transport/endpoints.h"

#include <gtest/gtest.h>

#include "tests/transport/transport_test_util.h"

namespace troupe::transport::testing {
namespace {

TEST(EndpointsTest, KindIsTheScheme) {
  EXPECT_EQ(kind_of("ucx://10.0.0.1:7000"), "ucx");
  EXPECT_EQ(kind_of("tcp://[::1]:80"), "tcp");
  EXPECT_EQ(kind_of("10.0.0.1:7000"), "");
}

TEST(EndpointsTest, RanksBestFirstAndDropsWhatCannotBeUsed) {
  std::vector<std::string> advertised = {"tcp://a:1", "quic://a:2", "ucx://a:3", "tcp://b:4",
                                         "inproc://w"};
  EXPECT_EQ(rank_endpoints(advertised, {"tcp", "ucx"}),
            (std::vector<std::string>{"ucx://a:3", "tcp://a:1", "tcp://b:4"}));
  EXPECT_EQ(rank_endpoints(advertised, {"tcp"}),
            (std::vector<std::string>{"tcp://a:1", "tcp://b:4"}));
  EXPECT_EQ(rank_endpoints(advertised, {"inproc", "tcp", "ucx"}).front(), "inproc://w");
  EXPECT_TRUE(rank_endpoints(advertised, {"rdma"}).empty());
}

// A server listening on tcp and (where available) ucx, and a client with both.
class ConnectBestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tcp_server_ = *make_transport("tcp", options_with(kToken, "server"));
    tcp_client_ = *make_transport("tcp", options_with(kToken, "client"));
    auto tl = tcp_server_->listen("tcp://127.0.0.1:0", echo_callbacks);
    ASSERT_TRUE(tl.ok());
    tcp_listener_ = *std::move(tl);
    auto us = make_transport("ucx", options_with(kToken, "server"));
    if (!us.ok()) GTEST_SKIP() << "transport ucx is not available: " << us.status();
    ucx_server_ = *std::move(us);
    ucx_client_ = *make_transport("ucx", options_with(kToken, "client"));
    auto ul = ucx_server_->listen("ucx://127.0.0.1:0", echo_callbacks);
    ASSERT_TRUE(ul.ok());
    ucx_listener_ = *std::move(ul);
  }

  std::map<std::string, Transport*, std::less<>> client_transports() {
    return {{"tcp", tcp_client_.get()}, {"ucx", ucx_client_.get()}};
  }

  Inbox inbox_;
  std::unique_ptr<Transport> tcp_server_, tcp_client_, ucx_server_, ucx_client_;
  std::unique_ptr<Listener> tcp_listener_, ucx_listener_;
};

TEST_F(ConnectBestTest, PicksUcxOverTcp) {
  auto conn =
      connect_best(client_transports(), {tcp_listener_->address(), ucx_listener_->address()},
                   inbox_.callbacks(), absl::Seconds(10));
  ASSERT_TRUE(conn.ok()) << conn.status();
  ASSERT_TRUE((*conn)->send(tagged(1, 2)).ok());
  ASSERT_TRUE(inbox_.wait_frames(1, absl::Seconds(10)));
  EXPECT_EQ(ucx_server_->stats().connections_accepted.load(), 1u);
  EXPECT_EQ(tcp_server_->stats().connections_accepted.load(), 0u);
}

TEST_F(ConnectBestTest, FallsBackWhenTheBestIsUnreachable) {
  // A ucx endpoint nobody listens on (its side channel port is closed).
  auto conn = connect_best(client_transports(), {"ucx://127.0.0.1:1", tcp_listener_->address()},
                           inbox_.callbacks(), absl::Seconds(10));
  ASSERT_TRUE(conn.ok()) << conn.status();
  EXPECT_EQ(tcp_server_->stats().connections_accepted.load(), 1u);
}

TEST_F(ConnectBestTest, AWrongTokenIsNotRetriedElsewhere) {
  auto stranger = *make_transport("ucx", options_with("another-cluster", "stranger"));
  auto stranger_tcp = *make_transport("tcp", options_with("another-cluster", "stranger"));
  auto conn = connect_best({{"tcp", stranger_tcp.get()}, {"ucx", stranger.get()}},
                           {ucx_listener_->address(), tcp_listener_->address()}, inbox_.callbacks(),
                           absl::Seconds(10));
  ASSERT_FALSE(conn.ok());
  EXPECT_TRUE(absl::IsPermissionDenied(conn.status())) << conn.status();
  EXPECT_EQ(tcp_server_->stats().connections_refused.load(), 0u);  // never tried
}

TEST_F(ConnectBestTest, NothingUsableIsNotFound) {
  auto conn = connect_best({{"tcp", tcp_client_.get()}}, {"ucx://127.0.0.1:5", "quic://x:1"},
                           inbox_.callbacks(), absl::Seconds(1));
  ASSERT_FALSE(conn.ok());
  EXPECT_TRUE(absl::IsNotFound(conn.status())) << conn.status();
  EXPECT_NE(conn.status().message().find("no usable endpoint"), std::string::npos);
}

}  // namespace
}  // namespace troupe::transport::testing
