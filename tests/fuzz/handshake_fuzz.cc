// libFuzzer target for the handshake: a Session, as a server or a client,
// fed any sequence of frames a peer without the token could send. It must
// refuse or wait, never crash, hang or hold more than the handshake's limits;
// and it must never open (the input cannot prove a token it does not know).
//
// Input: one byte for the role (even: server, odd: client), then frames,
// each a little-endian u16 length and that many bytes of wire encoding.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>

#include "transport/detail/session.h"
#include "transport/frame.h"

namespace {

using troupe::transport::Frame;
using troupe::transport::Role;

class FuzzSession final : public troupe::transport::detail::Session {
 public:
  explicit FuzzSession(Role role)
      : Session(role, options(), std::make_shared<troupe::transport::TransportStats>(), "fuzz") {}
  using Session::frame_limits;  // what a transport reads the next frame with

 protected:
  absl::Status write_frame(Frame&&) override { return absl::OkStatus(); }
  void shutdown_channel() override {}

 private:
  static troupe::transport::TransportOptions options() {
    troupe::transport::TransportOptions o;
    o.token = std::string(64, 'a');
    o.local_name = "fuzz";
    return o;
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  auto session = std::make_shared<FuzzSession>(data[0] % 2 == 0 ? Role::kServer : Role::kClient);
  session->set_accept([](std::shared_ptr<troupe::transport::Connection>) {
    std::abort();  // opened without the token
    return troupe::transport::ConnectionCallbacks{};
  });
  session->start();
  size_t at = 1;
  while (at + 2 <= size) {
    size_t n = data[at] | (size_t{data[at + 1]} << 8);
    at += 2;
    if (n > size - at) n = size - at;
    std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data + at), n);
    at += n;
    absl::StatusOr<Frame> frame = troupe::transport::decode_frame(bytes, session->frame_limits());
    if (!frame.ok()) {
      session->on_bad_frame(frame.status());
    } else {
      session->on_frame_received(*frame);
    }
  }
  if (session->open()) std::abort();
  return 0;
}
