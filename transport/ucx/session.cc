// A ucx connection's own side: frames it is given to send, its close, the
// callbacks it defers while a thread that may not run them drives the worker,
// and DirectIo, through which a consumer drives the worker itself.
#include <memory>
#include <mutex>
#include <utility>

#include "absl/status/status.h"
#include "transport/ucx/detail/session.h"
#include "transport/ucx/detail/transport.h"

namespace troupe::transport::ucx {

absl::Status UcxSession::write_frame(Frame&& frame) {
  if (tls_running == link_.get()) {
    // A reply from a callback, or a thread driving the worker: no hand-off.
    // (Once the transport is going, sends fail below.)
    if (UcxTransport* t = link_->live.load(std::memory_order_acquire)) {
      t->send_now(this, std::move(frame));
      return absl::OkStatus();
    }
  }
  // Any other thread (an actor replying, a driver calling, a communicator):
  // send from here when the worker is free, instead of handing the frame to
  // the progress thread and waiting for it to wake and take it.
  bool sent = false;
  link_->visit([&](UcxTransport& t) { sent = t.try_send_here(this, frame); });
  if (sent) return absl::OkStatus();
  std::lock_guard<std::mutex> lock(link_->mu);
  if (link_->transport == nullptr) return absl::UnavailableError("the ucx transport has shut down");
  link_->transport->post_send(std::static_pointer_cast<UcxSession>(shared_from_this()),
                              std::move(frame));
  return absl::OkStatus();
}

void UcxSession::shutdown_channel() {
  std::lock_guard<std::mutex> lock(link_->mu);
  if (link_->transport == nullptr) return;
  auto self = std::static_pointer_cast<UcxSession>(shared_from_this());
  UcxTransport* t = link_->transport;
  t->post([t, self] { t->close_now(self); });
}

void UcxSession::drop_channel() {
  std::lock_guard<std::mutex> lock(link_->mu);
  if (link_->transport == nullptr) return;
  auto self = std::static_pointer_cast<UcxSession>(shared_from_this());
  UcxTransport* t = link_->transport;
  // A forced close of the endpoint cancels the sends queued on it, which
  // releases their buffers.
  t->post([t, self] { t->drop(self, absl::AbortedError("the connection was aborted")); });
}

// Only on a driving thread, so the transport is alive (it is being visited).
void UcxSession::defer(Event event) {
  deferred_.push_back(std::move(event));
  if (flush_posted_) return;
  flush_posted_ = true;
  auto self = std::static_pointer_cast<UcxSession>(shared_from_this());
  link_->live.load(std::memory_order_relaxed)->post([self] { self->flush_deferred(); });
}

void UcxSession::flush_deferred() {
  flush_posted_ = false;
  while (!deferred_.empty()) {
    Event e = std::move(deferred_.front());
    deferred_.pop_front();
    switch (e.kind) {
      case Event::kFrame:
        on_frame_received(e.frame);
        break;
      case Event::kBadFrame:
        on_bad_frame(e.status);
        break;
      case Event::kClosed:
        on_channel_closed(std::move(e.status));
        break;
    }
  }
}

// A driving thread stays a visitor from begin_driving() to end_driving(), so
// that poll() in between need not check in each time.
void UcxSession::begin_driving() {
  link_->visitors.fetch_add(1, std::memory_order_seq_cst);
  if (UcxTransport* t = link_->live.load(std::memory_order_seq_cst)) t->begin_driving();
}

void UcxSession::end_driving(bool blocking) {
  if (UcxTransport* t = link_->live.load(std::memory_order_seq_cst)) t->end_driving(blocking);
  link_->visitors.fetch_sub(1, std::memory_order_seq_cst);
}

void UcxSession::set_placement(Placement place) {
  link_->visit([&](UcxTransport& t) { t.with_worker([&] { placement = std::move(place); }); });
}

bool UcxSession::poll() {
  UcxTransport* t = link_->live.load(std::memory_order_acquire);
  return t != nullptr && t->poll_once();
}

}  // namespace troupe::transport::ucx
