// Connections set up and ended: listen and connect over the side channel,
// the endpoint exchange on it (detail/transport.h, "How a connection is set
// up"), and the end of a session, whoever ends it.
#include <ucp/api/ucp.h>

#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "spdlog/spdlog.h"
#include "transport/address.h"
#include "transport/ucx/detail/transport.h"

namespace troupe::transport::ucx {
namespace {

// "ucx://h:p" -> "tcp://h:p", the side channel's address.
absl::StatusOr<std::string> side_address(std::string_view address) {
  absl::StatusOr<HostPort> hp = parse_address(address, "ucx");
  if (!hp.ok()) return hp.status();
  return absl::StrCat("tcp://", std::string(address.substr(6)));
}

class UcxListener final : public Listener {
 public:
  UcxListener(std::unique_ptr<Listener> side, std::string address)
      : side_(std::move(side)), address_(std::move(address)) {}
  std::string address() const override { return address_; }
  void close() override { side_->close(); }

 private:
  std::unique_ptr<Listener> side_;
  std::string address_;
};

}  // namespace

ConnectionCallbacks UcxTransport::side_callbacks(std::weak_ptr<UcxSession> session) {
  return ConnectionCallbacks{[this, session](Frame& f) {
                               auto s = session.lock();
                               if (!s) return;
                               auto frame = std::make_shared<Frame>(std::move(f));
                               std::lock_guard<std::mutex> lock(link_->mu);
                               if (link_->transport != nullptr)
                                 post([this, s, frame] { connect_endpoint(s, std::move(*frame)); });
                             },
                             [this, session](absl::Status why) {
                               auto s = session.lock();
                               // An orderly close of the side channel follows the peer's Close
                               // frame over UCX, which may still be on its way: let that frame end
                               // the connection. Anything else means the peer is gone.
                               if (!s || why.ok()) return;
                               absl::Status lost =
                                   absl::UnavailableError("the peer's process went away");
                               std::lock_guard<std::mutex> lock(link_->mu);
                               if (link_->transport != nullptr)
                                 post([this, s, lost] { drop(s, lost); });
                             }};
}

std::shared_ptr<UcxSession> UcxTransport::open_session(Role role,
                                                       const std::shared_ptr<Connection>& side,
                                                       ConnectionCallbacks callbacks,
                                                       AcceptCallback accept) {
  uint64_t id = next_id_.fetch_add(1);
  auto s =
      std::make_shared<UcxSession>(role, options_, stats_, "ucx " + side->peer_name(), link_, id);
  s->side = side;
  if (role == Role::kClient) {
    s->set_callbacks(std::move(callbacks));
  } else {
    s->set_accept(std::move(accept));
  }
  {
    std::lock_guard<std::mutex> lock(sessions_mu_);
    by_id_[id] = s;
  }
  // Our half of the exchange: {our connection id, our worker address}.
  Frame hello;
  hello.buffers.emplace_back(kIdBytes);
  std::memcpy(hello.buffers.back().data(), &id, kIdBytes);
  hello.buffers.push_back(
      Buffer::copy_of({reinterpret_cast<const std::byte*>(address_), address_length_}));
  static_cast<void>(side->send(std::move(hello)));
  return s;
}

void UcxTransport::connect_endpoint(const std::shared_ptr<UcxSession>& s, Frame exchange) {
  if (s->gone || s->ep != nullptr) return;
  if (exchange.buffers.size() != 2 || exchange.buffers[0].size() != kIdBytes ||
      exchange.buffers[1].empty()) {
    drop(s, absl::InvalidArgumentError("malformed endpoint exchange on the side channel"));
    return;
  }
  std::memcpy(&s->peer_id, exchange.buffers[0].data(), kIdBytes);
  ucp_ep_params_t ep{};
  ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLER |
                  UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  ep.address = reinterpret_cast<const ucp_address_t*>(exchange.buffers[1].data());
  ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  ep.err_handler.cb = &UcxTransport::on_ep_error;
  ep.err_handler.arg = this;
  if (ucs_status_t st = ucp_ep_create(worker_, &ep, &s->ep); st != UCS_OK) {
    s->ep = nullptr;
    drop(s, ucx_error("ucp_ep_create", st));
    return;
  }
  by_ep_[s->ep] = s;
  // Our Hello goes first: frames held so far answer the peer's (its Proof).
  s->start();
  for (Frame& f : std::exchange(s->held, {}))
    send_now(s.get(), std::move(f));
}

void UcxTransport::close_now(const std::shared_ptr<UcxSession>& s) {
  end_session(s, absl::UnavailableError("the connection was closed"), /*flush=*/true);
}

void UcxTransport::drop(const std::shared_ptr<UcxSession>& s, absl::Status why) {
  end_session(s, std::move(why), /*flush=*/false);
}

void UcxTransport::end_session(const std::shared_ptr<UcxSession>& s, absl::Status why, bool flush) {
  if (s->gone) {
    // A forced close after a flushing one cannot cancel what that one waits
    // for: sends to a dead peer then wait for UCX to give up on it (their
    // buffers stay theirs: a flushing endpoint may still read them).
    if (!flush && s->flushing) {
      spdlog::debug("ucx: {} must end at once ({}), but it was already closing with a flush",
                    s->peer_name(), std::string(why.message()));
    }
    return;
  }
  spdlog::debug(
      "ucx: {} ends ({}){}; {} frames arriving, {} held; {} operations of the transport "
      "in flight",
      s->peer_name(), std::string(why.message()), flush ? ", flushing" : "", s->incoming.size(),
      s->held.size(), in_flight_.load());
  s->flushing = flush;
  s->gone = true;
  retired_.push_back(s);  // callbacks further up the stack may still use it
  known_.erase(s->id);
  if (last_id_ == s->id) {
    last_id_ = 0;  // no session has id 0: a frame naming it finds none
    last_session_ = nullptr;
  }
  {
    std::lock_guard<std::mutex> lock(sessions_mu_);
    by_id_.erase(s->id);
  }
  if (s->ep != nullptr) {
    ucp_ep_h ep = std::exchange(s->ep, nullptr);
    by_ep_.erase(ep);
    ucp_request_param_t param{};  // default: flush, queued sends go out first
    if (!flush) {
      param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      param.flags = UCP_EP_CLOSE_FLAG_FORCE;
    }
    ucs_status_ptr_t req = ucp_ep_close_nbx(ep, &param);
    if (UCS_PTR_IS_PTR(req)) ucp_request_free(req);  // completes in the background
  }
  // What never went out or will never be whole lets go of its buffers now,
  // not when the last holder of the connection does: a collective's lent
  // buffers among them. (After a flushing close a part still arriving by
  // rendezvous keeps its buffer until UCX ends that receive.)
  s->held.clear();
  if (!flush) {
    // With the endpoint gone nothing lands in them any more, even where a
    // receive still waits for UCX to end it.
    for (auto& in : s->incoming)
      in->frame = Frame();
    release_sending(*s);
  }
  s->incoming.clear();
  if (s->side) s->side->close();
  s->hand_up_closed(std::move(why));
}

void UcxTransport::release_sending(UcxSession& s) {
  int released = 0;
  for (std::weak_ptr<Frame>& f : std::exchange(s.sending, {})) {
    if (std::shared_ptr<Frame> frame = f.lock()) {
      *frame = Frame();
      ++released;
    }
  }
  if (released > 0) {
    spdlog::debug("ucx: {} ended at once; {} frames it was still sending let go of their buffers",
                  s.peer_name(), released);
  }
}

void UcxTransport::on_ep_error(void* arg, ucp_ep_h ep, ucs_status_t status) {
  auto* t = static_cast<UcxTransport*>(arg);
  auto it = t->by_ep_.find(ep);
  if (it == t->by_ep_.end()) return;
  std::shared_ptr<UcxSession> s = it->second;
  t->drop(s, absl::UnavailableError(ucs_status_string(status)));
}

absl::StatusOr<std::unique_ptr<Listener>> UcxTransport::listen(std::string_view address,
                                                               AcceptCallback on_accept) {
  absl::StatusOr<std::string> side_addr = side_address(address);
  if (!side_addr.ok()) return side_addr.status();
  auto accept = std::make_shared<AcceptCallback>(std::move(on_accept));
  auto listener = side_->listen(*side_addr, [this, accept](std::shared_ptr<Connection> side) {
    // Runs on the side channel's I/O thread, once the peer is authenticated.
    auto s = open_session(Role::kServer, side, {}, *accept);
    return side_callbacks(s);
  });
  if (!listener.ok()) return listener.status();
  std::string bound = "ucx://" + (*listener)->address().substr(6);
  return std::unique_ptr<Listener>(new UcxListener(*std::move(listener), bound));
}

absl::StatusOr<std::shared_ptr<Connection>> UcxTransport::connect(std::string_view address,
                                                                  ConnectionCallbacks callbacks,
                                                                  absl::Duration timeout) {
  absl::Time deadline = absl::Now() + timeout;
  absl::StatusOr<std::string> side_addr = side_address(address);
  if (!side_addr.ok()) return side_addr.status();
  // The side channel's callbacks need the session, which needs the channel:
  // they meet in `early`, which keeps what arrives before the session exists.
  struct Early {
    std::mutex mu;
    std::weak_ptr<UcxSession> session;
    std::vector<Frame> frames;
    std::optional<absl::Status> closed;
  };
  auto early = std::make_shared<Early>();
  auto side =
      side_->connect(*side_addr,
                     ConnectionCallbacks{[this, early](Frame& f) {
                                           std::unique_lock<std::mutex> lock(early->mu);
                                           if (early->session.expired()) {
                                             early->frames.push_back(std::move(f));
                                             return;
                                           }
                                           auto session = early->session;
                                           lock.unlock();
                                           side_callbacks(session).on_frame(f);
                                         },
                                         [this, early](absl::Status why) {
                                           std::unique_lock<std::mutex> lock(early->mu);
                                           if (early->session.expired()) {
                                             early->closed = std::move(why);
                                             return;
                                           }
                                           auto session = early->session;
                                           lock.unlock();
                                           side_callbacks(session).on_closed(std::move(why));
                                         }},
                     timeout);
  if (!side.ok()) return side.status();
  auto s = open_session(Role::kClient, *side, std::move(callbacks), nullptr);
  {
    std::lock_guard<std::mutex> lock(early->mu);
    early->session = s;
    ConnectionCallbacks cb = side_callbacks(s);
    for (Frame& f : early->frames)
      cb.on_frame(f);
    early->frames.clear();
    if (early->closed) cb.on_closed(*early->closed);
  }
  if (absl::Status ready = s->wait_ready(deadline); !ready.ok()) return ready;
  return std::shared_ptr<Connection>(s);
}

}  // namespace troupe::transport::ucx
