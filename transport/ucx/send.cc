// Frames going out: whole in one eager active message when small, otherwise
// their start and then each part (detail/transport.h, "How frames travel").
// Worker lock holder only.
#include <ucp/api/ucp.h>

#include <cstring>
#include <memory>
#include <new>
#include <utility>
#include <vector>

#include "spdlog/spdlog.h"
#include "transport/ucx/detail/transport.h"

namespace troupe::transport::ucx {
namespace {

// A larger frame's sends; freed when the last of its active messages completes.
struct SendOp {
  std::shared_ptr<Frame> frame;  // UcxSession::sending has a weak reference
  std::vector<std::byte> start;  // receiver id, header, lengths
  uint64_t to = 0;               // receiver id, the AM header of parts
  int pending = 0;
  InFlight in_flight;
};

template <class T>
void append(std::vector<std::byte>& out, const T& value) {
  const auto* p = reinterpret_cast<const std::byte*>(&value);
  out.insert(out.end(), p, p + sizeof(T));
}

// The receiver id, header and lengths table that start every frame.
void append_start(std::vector<std::byte>& out, uint64_t to, const FrameHeader& h, const Frame& f) {
  append(out, to);
  append(out, encode_header(h));
  for (const Buffer& b : f.buffers)
    append(out, uint64_t{b.size()});
}
}  // namespace

void UcxTransport::send_now(UcxSession* s, Frame&& frame) {
  if (s->gone) {
    Frame dropped = std::move(frame);  // let go of now, as a refused send's
    return;
  }
  if (s->ep == nullptr) {
    s->held.push_back(std::move(frame));  // the endpoint exchange is still on its way
    return;
  }
  FrameHeader h = header_of(frame);
  if (h.total_bytes() <= kInlineFrameBytes) {
    send_inline(s, h, frame);
  } else {
    send_parts(s, h, std::move(frame));
  }
}

void UcxTransport::send_inline(UcxSession* s, const FrameHeader& h, const Frame& f) {
  start_.resize(kIdBytes + h.total_bytes());
  std::byte* at = start_.data();
  auto put = [&at](const void* p, size_t n) {
    if (n > 0) std::memcpy(at, p, n);
    at += n;
  };
  put(&s->peer_id, kIdBytes);
  put(encode_header(h).data(), kFrameHeaderBytes);
  for (const Buffer& b : f.buffers) {
    uint64_t len = b.size();
    put(&len, sizeof(len));
  }
  put(f.message.data(), f.message.size());
  for (const Buffer& b : f.buffers)
    put(b.data(), b.size());
  ucp_request_param_t param{};
  param.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = UCP_AM_SEND_FLAG_EAGER;
  param.datatype = ucp_dt_make_contig(1);
  param.cb.send = [](void* request, ucs_status_t, void*) {
    static_cast<InlineSend*>(request)->~InlineSend();
    ucp_request_free(request);
  };
  ucs_status_ptr_t req =
      ucp_am_send_nbx(s->ep, kFrameStartAm, nullptr, 0, start_.data(), start_.size(), &param);
  if (req == nullptr) return;  // sent (the usual case): the bytes are UCX's now
  if (UCS_PTR_IS_ERR(req)) {
    drop(std::static_pointer_cast<UcxSession>(s->shared_from_this()),
         ucx_error("ucp_am_send_nbx", UCS_PTR_STATUS(req)));
    return;
  }
  // In flight: the request keeps the bytes; the callback runs later, on this thread.
  new (req) InlineSend{std::exchange(start_, {}), InFlight(in_flight_)};
}

void UcxTransport::send_parts(UcxSession* s, const FrameHeader& h, Frame f) {
  auto* op = new SendOp{std::make_shared<Frame>(std::move(f)),
                        {},
                        s->peer_id,
                        1,
                        InFlight(in_flight_)};  // 1: the guard
  append_start(op->start, op->to, h, *op->frame);
  std::vector<std::pair<void*, size_t>> parts;
  if (!op->frame->message.empty())
    parts.emplace_back(op->frame->message.data(), op->frame->message.size());
  for (Buffer& b : op->frame->buffers) {
    if (!b.empty()) parts.emplace_back(b.data(), b.size());
  }
  for (size_t i = 0; i <= parts.size(); ++i) {
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                         UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = i == 0 || parts[i - 1].second <= kEagerPartBytes ? UCP_AM_SEND_FLAG_EAGER : 0;
    param.datatype = ucp_dt_make_contig(1);
    param.user_data = op;
    param.cb.send = [](void* request, ucs_status_t status, void* user) {
      auto* o = static_cast<SendOp*>(user);
      if (status != UCS_OK) {
        spdlog::debug("ucx: a part of a frame to connection {} ended: {}", o->to,
                      ucs_status_string(status));
      }
      if (--o->pending == 0) delete o;
      ucp_request_free(request);
    };
    ++op->pending;
    ucs_status_ptr_t req = i == 0
                               ? ucp_am_send_nbx(s->ep, kFrameStartAm, nullptr, 0, op->start.data(),
                                                 op->start.size(), &param)
                               : ucp_am_send_nbx(s->ep, kFramePartAm, &op->to, kIdBytes,
                                                 parts[i - 1].first, parts[i - 1].second, &param);
    if (req == nullptr || UCS_PTR_IS_ERR(req)) --op->pending;  // done, or never started
    if (UCS_PTR_IS_ERR(req)) {
      if (--op->pending == 0) delete op;  // the guard
      drop(std::static_pointer_cast<UcxSession>(s->shared_from_this()),
           ucx_error("ucp_am_send_nbx", UCS_PTR_STATUS(req)));
      return;
    }
  }
  if (--op->pending == 0) {  // the guard: every part went out at once
    delete op;
    return;
  }
  // Expired entries are pruned as new ones come, so the list stays as long
  // as the frames in flight.
  std::erase_if(s->sending, [](const std::weak_ptr<Frame>& w) { return w.expired(); });
  s->sending.push_back(op->frame);
}

}  // namespace troupe::transport::ucx
