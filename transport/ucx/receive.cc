// Frames coming in: the active-message handlers, which find the receiving
// session by the id a frame names, deliver small frames at once, and land
// the parts of larger ones (by copy, or pulled by rendezvous) in order.
// Worker lock holder only.
#include <ucp/api/ucp.h>

#include <cstring>
#include <memory>
#include <mutex>
#include <span>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "transport/ucx/detail/transport.h"

namespace troupe::transport::ucx {
namespace {

struct RecvOp {
  std::shared_ptr<UcxSession> session;
  std::shared_ptr<UcxSession::Incoming> incoming;
  InFlight in_flight;
};

}  // namespace

UcxSession* UcxTransport::session_by_id(uint64_t id) {
  if (id == last_id_) return last_session_;  // frames mostly come in runs for one
  UcxSession* s = nullptr;
  if (auto it = known_.find(id); it != known_.end()) {
    s = it->second.get();
  } else {
    std::lock_guard<std::mutex> lock(sessions_mu_);
    auto found = by_id_.find(id);
    if (found == by_id_.end()) return nullptr;
    known_.emplace(id, found->second);
    s = found->second.get();
  }
  last_id_ = id;
  last_session_ = s;
  return s;
}

ucs_status_t UcxTransport::on_frame_start(void* arg, const void*, size_t, void* data, size_t length,
                                          const ucp_am_recv_param_t* param) {
  auto* t = static_cast<UcxTransport*>(arg);
  if (length < kIdBytes) return UCS_OK;
  uint64_t to = 0;
  std::memcpy(&to, data, kIdBytes);
  UcxSession* s = t->session_by_id(to);
  if (s == nullptr || s->gone) return UCS_OK;
  if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) {
    s->hand_up_bad_frame(absl::InvalidArgumentError("a frame start arrived by rendezvous"));
    return UCS_OK;
  }
  const FrameLimits& limits = t->options_.limits;
  std::span<const std::byte> bytes(static_cast<const std::byte*>(data) + kIdBytes,
                                   length - kIdBytes);
  absl::StatusOr<FrameHeader> h = decode_header(bytes, limits);
  if (!h.ok()) {
    s->hand_up_bad_frame(h.status());
    return UCS_OK;
  }
  size_t table_end = kFrameHeaderBytes + h->lengths_bytes();
  bool whole = bytes.size() == h->total_bytes();
  if (bytes.size() != table_end && !whole) {
    s->hand_up_bad_frame(absl::InvalidArgumentError("frame start has the wrong size"));
    return UCS_OK;
  }
  LengthTable lengths;
  if (absl::Status v = decode_lengths(*h, bytes.subspan(kFrameHeaderBytes), limits, lengths);
      !v.ok()) {
    s->hand_up_bad_frame(v);
    return UCS_OK;
  }
  if (!s->incoming.empty() && s->incoming.back()->next_part < s->incoming.back()->parts.size()) {
    s->hand_up_bad_frame(
        absl::InvalidArgumentError("a frame started before the last one was whole"));
    return UCS_OK;
  }
  if (whole && s->incoming.empty()) {  // the usual small frame: deliver it now
    InboundFrame inbound(*t);
    Frame& f = *inbound;
    refit(f, h->kind, h->message_bytes, lengths);
    const std::byte* src = bytes.data() + table_end;
    if (h->message_bytes > 0) std::memcpy(f.message.data(), src, h->message_bytes);
    src += h->message_bytes;
    for (Buffer& b : f.buffers) {
      if (!b.empty()) std::memcpy(b.data(), src, b.size());
      src += b.size();
    }
    if (absl::Status v = validate_message(f.message, limits); !v.ok()) {
      s->hand_up_bad_frame(v);
    } else {
      s->hand_up_frame(f);
    }
    return UCS_OK;
  }
  auto in = std::make_shared<UcxSession::Incoming>();
  UcxSession::Incoming* raw = in.get();
  raw->frame.kind = h->kind;
  if (whole) {  // behind a frame still arriving: take it all now
    const std::byte* src = bytes.data() + table_end;
    raw->frame.message = Buffer::copy_of({src, h->message_bytes});
    src += h->message_bytes;
    for (uint64_t len : lengths) {
      raw->frame.buffers.push_back(Buffer::copy_of({src, len}));
      src += len;
    }
  } else {
    raw->frame.message = Buffer(h->message_bytes);
    if (!raw->frame.message.empty())
      raw->parts.push_back({UcxSession::Incoming::kMessage, h->message_bytes});
    for (uint64_t len : lengths) {
      raw->frame.buffers.emplace_back();
      if (len > 0) raw->parts.push_back({static_cast<int>(raw->frame.buffers.size() - 1), len});
    }
  }
  raw->complete = raw->parts.empty();
  s->incoming.push_back(std::move(in));
  if (raw->complete) s->deliver_completed();
  return UCS_OK;
}

ucs_status_t UcxTransport::on_frame_part(void* arg, const void* header, size_t header_length,
                                         void* data, size_t length,
                                         const ucp_am_recv_param_t* param) {
  auto* t = static_cast<UcxTransport*>(arg);
  if (header_length != kIdBytes) return UCS_OK;
  uint64_t to = 0;
  std::memcpy(&to, header, kIdBytes);
  UcxSession* s = t->session_by_id(to);
  if (s == nullptr || s->gone) return UCS_OK;
  if (s->incoming.empty() || s->incoming.back()->next_part >= s->incoming.back()->parts.size()) {
    s->hand_up_bad_frame(absl::InvalidArgumentError("a frame part with no frame to belong to"));
    return UCS_OK;
  }
  t->receive_part(std::static_pointer_cast<UcxSession>(s->shared_from_this()), s->incoming.back(),
                  data, length, param);
  return UCS_OK;
}

void UcxTransport::part_received(const std::shared_ptr<UcxSession>& s, UcxSession::Incoming* in) {
  if (s->gone) return;  // its frames went with it
  if (++in->parts_done == in->parts.size()) {
    in->complete = true;
    s->deliver_completed();
  }
}

// Receives the next part of `in`: copied now if it came eagerly, otherwise
// pulled by rendezvous straight into its buffer.
void UcxTransport::receive_part(const std::shared_ptr<UcxSession>& s,
                                const std::shared_ptr<UcxSession::Incoming>& in, void* data,
                                size_t length, const ucp_am_recv_param_t* param) {
  const UcxSession::Incoming::Part part = in->parts[in->next_part++];
  const size_t size = part.bytes;
  if (length != size) {
    s->hand_up_bad_frame(absl::InvalidArgumentError(
        absl::StrCat("frame part of ", length, " bytes where ", size, " were announced")));
    return;
  }
  std::byte* target = s->land(*in, part);
  if ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) == 0) {
    std::memcpy(target, data, size);
    part_received(s, in.get());
    return;
  }
  auto* op = new RecvOp{s, in, InFlight(in_flight_)};
  ucp_request_param_t rp{};
  rp.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_DATATYPE;
  rp.datatype = ucp_dt_make_contig(1);
  rp.user_data = op;
  rp.cb.recv_am = [](void* request, ucs_status_t status, size_t, void* user) {
    auto* o = static_cast<RecvOp*>(user);
    if (status == UCS_OK) part_received(o->session, o->incoming.get());
    delete o;
    ucp_request_free(request);
  };
  ucs_status_ptr_t req = ucp_am_recv_data_nbx(worker_, data, target, size, &rp);
  if (req == nullptr) {
    delete op;
    part_received(s, in.get());
  } else if (UCS_PTR_IS_ERR(req)) {
    delete op;
    drop(s, ucx_error("ucp_am_recv_data_nbx", UCS_PTR_STATUS(req)));
  }
}

}  // namespace troupe::transport::ucx
