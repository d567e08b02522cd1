// What a ucx listener does with a peer that speaks raw UCP active messages
// instead of frames: garbage, a wrong version, an oversized header, parts
// that do not match what was announced, data before authentication. Each
// drops only that peer's connection; a well-behaved one keeps working.
//
// The raw peer sets up as a troupe client would (an authenticated side
// channel, then the endpoint exchange over it) and then sends whatever bytes
// the test gives it, bypassing the frame encoder.
#include <ucp/api/ucp.h>

#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "tests/transport/transport_test_util.h"
#include "transport/address.h"

namespace troupe::transport::testing {
namespace {

// The ucx transport's active-message ids and receiver-id prefix.
constexpr unsigned kFrameStartAm = 0;
constexpr unsigned kFramePartAm = 1;

ucs_status_t ignore_am(void*, const void*, size_t, void*, size_t, const ucp_am_recv_param_t*) {
  return UCS_OK;
}

class RawUcxPeer {
 public:
  // Connects to the ucx listener at `address` ("ucx://host:port").
  RawUcxPeer(Transport& side_transport, const std::string& address) {
    ucp_config_t* config = nullptr;
    if (ucp_config_read(nullptr, nullptr, &config) != UCS_OK) return;
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_AM;
    ucs_status_t s = ucp_init(&params, config, &context_);
    ucp_config_release(config);
    if (s != UCS_OK) return;
    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE;
    if (ucp_worker_create(context_, &wp, &worker_) != UCS_OK) return;
    for (unsigned id : {kFrameStartAm, kFramePartAm}) {
      ucp_am_handler_param_t hp{};
      hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB;
      hp.id = id;
      hp.cb = ignore_am;
      ucp_worker_set_am_recv_handler(worker_, &hp);
    }
    ucp_address_t* my_address = nullptr;
    size_t my_length = 0;
    if (ucp_worker_get_address(worker_, &my_address, &my_length) != UCS_OK) return;

    auto side = side_transport.connect("tcp://" + address.substr(6), side_inbox_.callbacks(),
                                       absl::Seconds(10));
    if (!side.ok()) {
      ucp_worker_release_address(worker_, my_address);
      return;
    }
    side_ = *side;
    Frame exchange;
    uint64_t my_id = 7;
    exchange.buffers.push_back(Buffer::copy_of({reinterpret_cast<std::byte*>(&my_id), 8}));
    exchange.buffers.push_back(
        Buffer::copy_of({reinterpret_cast<std::byte*>(my_address), my_length}));
    ucp_worker_release_address(worker_, my_address);
    if (!side_->send(std::move(exchange)).ok()) return;
    if (!side_inbox_.wait_frames(1, absl::Seconds(10))) return;
    Frame theirs = std::move(side_inbox_.take().front());
    if (theirs.buffers.size() != 2 || theirs.buffers[0].size() != 8) return;
    std::memcpy(&their_id_, theirs.buffers[0].data(), 8);
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    ep.address = reinterpret_cast<const ucp_address_t*>(theirs.buffers[1].data());
    ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    if (ucp_ep_create(worker_, &ep, &ep_) != UCS_OK) ep_ = nullptr;
  }

  ~RawUcxPeer() {
    if (ep_ != nullptr) {
      ucp_request_param_t param{};
      param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      param.flags = UCP_EP_CLOSE_FLAG_FORCE;
      ucs_status_ptr_t req = ucp_ep_close_nbx(ep_, &param);
      for (int i = 0; UCS_PTR_IS_PTR(req) && i < 100000; ++i) {
        ucp_worker_progress(worker_);
        if (ucp_request_check_status(req) != UCS_INPROGRESS) break;
      }
      if (UCS_PTR_IS_PTR(req)) ucp_request_free(req);
    }
    if (side_) side_->close();
    if (worker_ != nullptr) ucp_worker_destroy(worker_);
    if (context_ != nullptr) ucp_cleanup(context_);
  }

  bool ready() const { return ep_ != nullptr; }

  // A frame start: the receiver's id, then `bytes`.
  void send_start(const std::vector<std::byte>& bytes) {
    std::vector<std::byte> message(8 + bytes.size());
    std::memcpy(message.data(), &their_id_, 8);
    if (!bytes.empty()) std::memcpy(message.data() + 8, bytes.data(), bytes.size());
    send(kFrameStartAm, nullptr, 0, message);
  }
  // A frame part: the receiver's id as the header, then `bytes`.
  void send_part(std::vector<std::byte> bytes) {
    send(kFramePartAm, &their_id_, sizeof(their_id_), bytes);
  }

  // True if the server ends the connection (its side channel closes) within
  // `timeout`.
  bool dropped_by_server(absl::Duration timeout) {
    absl::Time deadline = absl::Now() + timeout;
    while (absl::Now() < deadline) {
      ucp_worker_progress(worker_);
      if (side_inbox_.wait_closed(absl::Milliseconds(1))) return true;
    }
    return false;
  }

 private:
  void send(unsigned id, const void* header, size_t header_length,
            const std::vector<std::byte>& bytes) {
    ucp_request_param_t param{};
    ucs_status_ptr_t req =
        ucp_am_send_nbx(ep_, id, header, header_length, bytes.data(), bytes.size(), &param);
    for (int i = 0; UCS_PTR_IS_PTR(req) && i < 1000000; ++i) {
      ucp_worker_progress(worker_);
      if (ucp_request_check_status(req) != UCS_INPROGRESS) break;
    }
    if (UCS_PTR_IS_PTR(req)) ucp_request_free(req);
  }

  Inbox side_inbox_;
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  ucp_ep_h ep_ = nullptr;
  std::shared_ptr<Connection> side_;
  uint64_t their_id_ = 0;
};

std::vector<std::byte> header_bytes(FrameHeader h) {
  auto a = encode_header(h);
  return std::vector<std::byte>(a.begin(), a.end());
}

// A frame start: `h`, then the lengths table `lengths`.
std::vector<std::byte> start_bytes(FrameHeader h, std::initializer_list<uint64_t> lengths) {
  std::vector<std::byte> out = header_bytes(h);
  size_t at = out.size();
  out.resize(at + 8 * lengths.size());
  for (uint64_t len : lengths) {
    std::memcpy(out.data() + at, &len, 8);
    at += 8;
  }
  return out;
}

class UcxRobustnessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TransportOptions o = options_with(kToken, "server");
    o.limits.max_frame_bytes = 64 << 20;
    auto server = make_transport("ucx", o);
    if (!server.ok()) GTEST_SKIP() << "transport ucx is not available: " << server.status();
    server_ = *std::move(server);
    client_ = *make_transport("ucx", options_with(kToken, "client"));
    side_ = *make_transport("tcp", options_with(kToken, "raw peer"));
    auto listener = server_->listen("ucx://127.0.0.1:0", echo_callbacks);
    ASSERT_TRUE(listener.ok()) << listener.status();
    listener_ = *std::move(listener);
    auto good = client_->connect(listener_->address(), good_inbox_.callbacks(), absl::Seconds(10));
    ASSERT_TRUE(good.ok()) << good.status();
    good_ = *good;
    raw_ = std::make_unique<RawUcxPeer>(*side_, listener_->address());
    ASSERT_TRUE(raw_->ready());
  }

  void expect_good_connection_still_works() { expect_echo(*good_, good_inbox_, echoes_); }

  uint64_t bad_frames() const { return server_->stats().bad_frames.load(); }

  Inbox good_inbox_;  // declared first: outlives the transports that call it
  std::unique_ptr<Transport> server_;
  std::unique_ptr<Transport> client_;
  std::unique_ptr<Transport> side_;
  std::unique_ptr<Listener> listener_;
  std::shared_ptr<Connection> good_;
  std::unique_ptr<RawUcxPeer> raw_;
  uint64_t echoes_ = 0;
};

TEST_F(UcxRobustnessTest, GarbageIsDroppedAndCounted) {
  std::string junk = "GET / HTTP/1.1\r\nHost: troupe\r\n\r\n";
  raw_->send_start({reinterpret_cast<const std::byte*>(junk.data()),
                    reinterpret_cast<const std::byte*>(junk.data()) + junk.size()});
  EXPECT_TRUE(raw_->dropped_by_server(absl::Seconds(10)));
  EXPECT_GE(bad_frames(), 1u);
  expect_good_connection_still_works();
}

TEST_F(UcxRobustnessTest, WrongVersionIsDropped) {
  auto bytes = header_bytes(FrameHeader{FrameKind::kHello, 0, 0, 0});
  bytes[4] = std::byte{9};
  raw_->send_start(bytes);
  EXPECT_TRUE(raw_->dropped_by_server(absl::Seconds(10)));
  EXPECT_GE(bad_frames(), 1u);
  expect_good_connection_still_works();
}

TEST_F(UcxRobustnessTest, OversizedFrameIsDroppedBeforeAllocation) {
  raw_->send_start(
      start_bytes(FrameHeader{FrameKind::kData, 1, 0, uint64_t{1} << 40}, {uint64_t{1} << 40}));
  EXPECT_TRUE(raw_->dropped_by_server(absl::Seconds(10)));
  EXPECT_GE(bad_frames(), 1u);
  expect_good_connection_still_works();
}

TEST_F(UcxRobustnessTest, TruncatedFrameStartIsDropped) {
  // The header announces a 64-byte message; the start carries 16 of them.
  auto bytes = header_bytes(FrameHeader{FrameKind::kHello, 0, 64, 0});
  bytes.resize(bytes.size() + 16);
  raw_->send_start(bytes);
  EXPECT_TRUE(raw_->dropped_by_server(absl::Seconds(10)));
  EXPECT_GE(bad_frames(), 1u);
  expect_good_connection_still_works();
}

TEST_F(UcxRobustnessTest, PartOfTheWrongSizeIsDropped) {
  // A start announcing one 8 KiB buffer, then a part of 100 bytes.
  raw_->send_start(start_bytes(FrameHeader{FrameKind::kData, 1, 0, 8192}, {8192}));
  raw_->send_part(std::vector<std::byte>(100));
  EXPECT_TRUE(raw_->dropped_by_server(absl::Seconds(10)));
  EXPECT_GE(bad_frames(), 1u);
  expect_good_connection_still_works();
}

TEST_F(UcxRobustnessTest, PartWithNoFrameIsDropped) {
  raw_->send_part(std::vector<std::byte>(64));
  EXPECT_TRUE(raw_->dropped_by_server(absl::Seconds(10)));
  EXPECT_GE(bad_frames(), 1u);
  expect_good_connection_still_works();
}

TEST_F(UcxRobustnessTest, DataBeforeAuthenticationIsRefused) {
  auto bytes = encode_frame(tagged(1, 1));
  raw_->send_start(bytes);
  EXPECT_TRUE(raw_->dropped_by_server(absl::Seconds(10)));
  EXPECT_GE(server_->stats().connections_refused.load(), 1u);
  expect_good_connection_still_works();
}

}  // namespace
}  // namespace troupe::transport::testing
