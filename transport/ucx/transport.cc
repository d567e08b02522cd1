#include "transport/ucx/transport.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#include <cstring>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "transport/address.h"
#include "transport/detail/session.h"

namespace troupe::transport::ucx {
namespace {

// A frame travels as active messages, each one contiguous buffer (UCX 1.13's
// shared-memory transports mishandle I/O vectors and AM headers). A frame of
// at most kInlineFrameBytes goes whole, as its wire bytes, in one eager
// message (kFrameStartAm). A larger one sends its header and lengths that way,
// then (kFramePartAm) the message and each non-empty buffer, eager or by
// rendezvous as UCX sees fit. UCP delivers an endpoint's active messages in
// order, so the receiver knows which part comes next.
constexpr unsigned kFrameStartAm = 0;
constexpr unsigned kFramePartAm = 1;
constexpr size_t kInlineFrameBytes = 4096;
// Progress calls without events before the thread blocks on the worker's fd.
constexpr int kSpinsBeforeSleep = 20000;
constexpr int kSleepMillis = 50;

absl::Status ucx_error(std::string_view what, ucs_status_t status) {
  return absl::UnavailableError(absl::StrCat(std::string(what), ": ", ucs_status_string(status)));
}

std::string sockaddr_name(const sockaddr_storage& ss) {
  char host[INET6_ADDRSTRLEN] = "?";
  uint16_t port = 0;
  if (ss.ss_family == AF_INET) {
    auto* in = reinterpret_cast<const sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
    port = ntohs(in->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    auto* in6 = reinterpret_cast<const sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
    port = ntohs(in6->sin6_port);
  }
  return absl::StrCat(host, ":", port);
}

absl::StatusOr<sockaddr_in> to_sockaddr(std::string_view address) {
  absl::StatusOr<HostPort> hp = parse_address(address, "ucx");
  if (!hp.ok()) return hp.status();
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(hp->port);
  if (inet_pton(AF_INET, hp->host.c_str(), &addr.sin_addr) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("ucx needs a numeric IPv4 host, not '", hp->host, "'"));
  }
  return addr;
}

class UcxTransport;

// How sessions reach their transport; cleared when it goes.
struct Link {
  std::mutex mu;
  UcxTransport* transport = nullptr;
};

class UcxSession final : public detail::Session {
 public:
  UcxSession(Role role, const TransportOptions& options, std::shared_ptr<TransportStats> stats,
             std::string name, std::shared_ptr<Link> link)
      : Session(role, options, std::move(stats), std::move(name)), link_(std::move(link)) {}

  // Progress thread only.
  ucp_ep_h ep = nullptr;
  absl::Time handshake_deadline = absl::InfiniteFuture();

  // Frames whose bytes are still arriving, in the order they were sent: a
  // small frame behind a large rendezvous one waits for it.
  struct Incoming {
    Frame frame;
    std::vector<std::pair<std::byte*, size_t>> parts;  // where each part lands
    size_t next_part = 0;                              // parts announced so far
    size_t parts_done = 0;                             // parts fully received
    bool complete = false;
  };
  std::deque<std::unique_ptr<Incoming>> incoming;

  void deliver_completed() {
    while (!incoming.empty() && incoming.front()->complete) {
      Frame f = std::move(incoming.front()->frame);
      incoming.pop_front();
      if (absl::Status s = validate_message(f.message, options().limits); !s.ok()) {
        on_bad_frame(s);
        incoming.clear();
        return;
      }
      on_frame_received(std::move(f));
    }
  }

 protected:
  absl::Status write_frame(Frame frame) override;
  void shutdown_channel() override;

 private:
  std::shared_ptr<Link> link_;
};

class UcxTransport final : public Transport {
 public:
  static absl::StatusOr<std::unique_ptr<Transport>> create(TransportOptions options) {
    auto t = std::unique_ptr<UcxTransport>(new UcxTransport(std::move(options)));
    if (absl::Status s = t->init(); !s.ok()) return s;
    return std::unique_ptr<Transport>(std::move(t));
  }

  ~UcxTransport() override {
    {
      std::lock_guard<std::mutex> lock(link_->mu);
      link_->transport = nullptr;
    }
    if (thread_.joinable()) {
      post([this] { stopping_ = true; });
      thread_.join();
    }
    if (worker_ != nullptr) ucp_worker_destroy(worker_);
    if (context_ != nullptr) ucp_cleanup(context_);
    if (wake_fd_ >= 0) ::close(wake_fd_);
  }

  std::string_view name() const override { return "ucx"; }
  const TransportStats& stats() const override { return *stats_; }

  absl::StatusOr<std::unique_ptr<Listener>> listen(std::string_view address,
                                                   AcceptCallback on_accept) override;
  absl::StatusOr<std::shared_ptr<Connection>> connect(std::string_view address,
                                                      ConnectionCallbacks callbacks,
                                                      absl::Duration timeout) override;

  // Runs `fn` on the progress thread. Thread-safe.
  void post(std::function<void()> fn) {
    {
      std::lock_guard<std::mutex> lock(commands_mu_);
      commands_.push_back(std::move(fn));
    }
    wake();
  }

  void send_now(const std::shared_ptr<UcxSession>& s, std::shared_ptr<Frame> frame);
  bool on_progress_thread() const { return std::this_thread::get_id() == thread_.get_id(); }
  void close_now(const std::shared_ptr<UcxSession>& s);
  void close_listener_now(ucp_listener_h l);

 private:
  explicit UcxTransport(TransportOptions options) : options_(std::move(options)) {}

  absl::Status init();
  void run();
  bool run_commands();
  void wake() {
    uint64_t one = 1;
    if (sleeping_.load(std::memory_order_seq_cst)) static_cast<void>(::write(wake_fd_, &one, 8));
  }
  void check_handshake_deadlines();
  void adopt(const std::shared_ptr<UcxSession>& s) { by_ep_[s->ep] = s; }
  void drop(const std::shared_ptr<UcxSession>& s, absl::Status why);

  static ucs_status_t on_frame_start(void* arg, const void* header, size_t header_length,
                                     void* data, size_t length, const ucp_am_recv_param_t* param);
  static ucs_status_t on_frame_part(void* arg, const void* header, size_t header_length, void* data,
                                    size_t length, const ucp_am_recv_param_t* param);
  std::shared_ptr<UcxSession> session_of(const ucp_am_recv_param_t* param);
  void receive_part(const std::shared_ptr<UcxSession>& s, UcxSession::Incoming* in, void* data,
                    size_t length, const ucp_am_recv_param_t* param);
  static void part_received(const std::shared_ptr<UcxSession>& s, UcxSession::Incoming* in);
  static void on_ep_error(void* arg, ucp_ep_h ep, ucs_status_t status);
  static void on_conn_request(ucp_conn_request_h request, void* arg);

  const TransportOptions options_;
  std::shared_ptr<TransportStats> stats_ = std::make_shared<TransportStats>();
  std::shared_ptr<Link> link_ = std::make_shared<Link>();
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  int worker_fd_ = -1;
  int wake_fd_ = -1;
  std::thread thread_;
  std::atomic<bool> sleeping_{false};

  std::mutex commands_mu_;
  std::deque<std::function<void()>> commands_;

  // Progress thread only.
  bool stopping_ = false;
  absl::flat_hash_map<ucp_ep_h, std::shared_ptr<UcxSession>> by_ep_;
  absl::flat_hash_map<ucp_listener_h, std::shared_ptr<AcceptCallback>> listeners_;
  std::vector<std::unique_ptr<std::pair<UcxTransport*, std::shared_ptr<AcceptCallback>>>>
      accept_args_;
};

absl::Status UcxSession::write_frame(Frame frame) {
  std::lock_guard<std::mutex> lock(link_->mu);
  if (link_->transport == nullptr) return absl::UnavailableError("the ucx transport has shut down");
  auto self = std::static_pointer_cast<UcxSession>(shared_from_this());
  auto f = std::make_shared<Frame>(std::move(frame));
  UcxTransport* t = link_->transport;
  if (t->on_progress_thread()) {
    t->send_now(self, std::move(f));  // a reply from a callback: no hand-off
  } else {
    t->post([t, self, f] { t->send_now(self, f); });
  }
  return absl::OkStatus();
}

void UcxSession::shutdown_channel() {
  std::lock_guard<std::mutex> lock(link_->mu);
  if (link_->transport == nullptr) return;
  auto self = std::static_pointer_cast<UcxSession>(shared_from_this());
  UcxTransport* t = link_->transport;
  t->post([t, self] { t->close_now(self); });
}

class UcxListener final : public Listener {
 public:
  UcxListener(std::shared_ptr<Link> link, ucp_listener_h listener, std::string address)
      : link_(std::move(link)), listener_(listener), address_(std::move(address)) {}
  ~UcxListener() override { close(); }
  std::string address() const override { return address_; }
  void close() override {
    std::promise<void> done;
    {
      std::lock_guard<std::mutex> lock(link_->mu);
      if (link_->transport == nullptr || listener_ == nullptr) return;
      UcxTransport* t = link_->transport;
      ucp_listener_h l = std::exchange(listener_, nullptr);
      t->post([t, l, &done] {
        t->close_listener_now(l);
        done.set_value();
      });
    }
    done.get_future().wait();
  }

 private:
  std::shared_ptr<Link> link_;
  ucp_listener_h listener_;
  std::string address_;
};

absl::Status UcxTransport::init() {
  ucp_config_t* config = nullptr;
  if (ucs_status_t s = ucp_config_read(nullptr, nullptr, &config); s != UCS_OK) {
    return ucx_error("ucp_config_read", s);
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
  ucs_status_t s = ucp_init(&params, config, &context_);
  ucp_config_release(config);
  if (s != UCS_OK) return ucx_error("ucp_init", s);

  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SINGLE;
  if (s = ucp_worker_create(context_, &wp, &worker_); s != UCS_OK) {
    return ucx_error("ucp_worker_create", s);
  }
  if (s = ucp_worker_get_efd(worker_, &worker_fd_); s != UCS_OK) {
    return ucx_error("ucp_worker_get_efd", s);
  }
  for (auto [id, cb] : {std::pair{kFrameStartAm, &UcxTransport::on_frame_start},
                        std::pair{kFramePartAm, &UcxTransport::on_frame_part}}) {
    ucp_am_handler_param_t hp{};
    hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                    UCP_AM_HANDLER_PARAM_FIELD_ARG;
    hp.id = id;
    hp.cb = cb;
    hp.arg = this;
    if (s = ucp_worker_set_am_recv_handler(worker_, &hp); s != UCS_OK) {
      return ucx_error("ucp_worker_set_am_recv_handler", s);
    }
  }
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) return absl::InternalError("eventfd failed");
  {
    std::lock_guard<std::mutex> lock(link_->mu);
    link_->transport = this;
  }
  thread_ = std::thread([this] { run(); });
  return absl::OkStatus();
}

bool UcxTransport::run_commands() {
  std::deque<std::function<void()>> batch;
  {
    std::lock_guard<std::mutex> lock(commands_mu_);
    batch.swap(commands_);
  }
  for (auto& fn : batch)
    fn();
  return !batch.empty();
}

void UcxTransport::run() {
  int idle = 0;
  while (!stopping_) {
    bool busy = run_commands();
    while (ucp_worker_progress(worker_) != 0)
      busy = true;
    if (busy) {
      idle = 0;
      continue;
    }
    if (++idle < kSpinsBeforeSleep) continue;
    idle = 0;
    check_handshake_deadlines();
    sleeping_.store(true, std::memory_order_seq_cst);
    bool have_commands;
    {
      std::lock_guard<std::mutex> lock(commands_mu_);
      have_commands = !commands_.empty();
    }
    if (!have_commands && ucp_worker_arm(worker_) == UCS_OK) {
      pollfd fds[2] = {{worker_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
      ::poll(fds, 2, kSleepMillis);
      uint64_t drained;
      while (::read(wake_fd_, &drained, 8) == 8) {
      }
    }
    sleeping_.store(false, std::memory_order_seq_cst);
  }
  // Shutting down: every connection ends now.
  auto sessions = std::move(by_ep_);
  for (auto& [ep, s] : sessions) {
    s->abort(absl::UnavailableError("the transport is shutting down"));
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = UCP_EP_CLOSE_FLAG_FORCE;
    ucs_status_ptr_t req = ucp_ep_close_nbx(ep, &param);
    if (UCS_PTR_IS_PTR(req)) {
      while (ucp_request_check_status(req) == UCS_INPROGRESS)
        ucp_worker_progress(worker_);
      ucp_request_free(req);
    }
  }
  for (auto& [l, cb] : listeners_)
    ucp_listener_destroy(l);
  listeners_.clear();
  // Let closes and sends still in flight finish (bounded) before the worker goes.
  absl::Time until = absl::Now() + absl::Milliseconds(200);
  for (int quiet = 0; quiet < 1000 && absl::Now() < until;) {
    quiet = ucp_worker_progress(worker_) != 0 ? 0 : quiet + 1;
  }
}

void UcxTransport::check_handshake_deadlines() {
  absl::Time now = absl::Now();
  std::vector<std::shared_ptr<UcxSession>> late;
  for (auto& [ep, s] : by_ep_) {
    if (s->handshake_deadline < now && !s->open()) late.push_back(s);
  }
  for (auto& s : late) {
    s->handshake_deadline = absl::InfiniteFuture();
    s->abort(absl::DeadlineExceededError(
        absl::StrCat("refused ", s->peer_name(), ": no handshake within the deadline")));
  }
}

// One frame's sends; freed when the last of its active messages completes.
struct SendOp {
  std::shared_ptr<UcxSession> session;
  std::shared_ptr<Frame> frame;
  std::vector<std::byte> header;
  int pending = 0;
};

void UcxTransport::send_now(const std::shared_ptr<UcxSession>& s, std::shared_ptr<Frame> frame) {
  if (s->ep == nullptr) return;
  auto* op = new SendOp{s, std::move(frame), {}, 1};  // 1: held while issuing
  Frame& f = *op->frame;
  auto head = encode_header(header_of(f));
  op->header.assign(head.begin(), head.end());
  for (uint64_t len : encode_lengths(f)) {
    const auto* p = reinterpret_cast<const std::byte*>(&len);
    op->header.insert(op->header.end(), p, p + 8);
  }
  std::vector<std::pair<void*, size_t>> parts;
  if (!f.message.empty()) parts.emplace_back(f.message.data(), f.message.size());
  for (Buffer& b : f.buffers) {
    if (!b.empty()) parts.emplace_back(b.data(), b.size());
  }
  if (f.wire_bytes() <= kInlineFrameBytes) {
    for (auto [data, size] : parts) {
      const auto* p = static_cast<const std::byte*>(data);
      op->header.insert(op->header.end(), p, p + size);
    }
    parts.clear();
  }
  for (size_t i = 0; i <= parts.size(); ++i) {
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                         UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = UCP_AM_SEND_FLAG_REPLY | (i == 0 ? UCP_AM_SEND_FLAG_EAGER : 0);
    param.datatype = ucp_dt_make_contig(1);
    param.user_data = op;
    param.cb.send = [](void* request, ucs_status_t, void* user) {
      auto* o = static_cast<SendOp*>(user);
      if (--o->pending == 0) delete o;
      ucp_request_free(request);
    };
    ++op->pending;
    ucs_status_ptr_t req = i == 0
                               ? ucp_am_send_nbx(s->ep, kFrameStartAm, nullptr, 0,
                                                 op->header.data(), op->header.size(), &param)
                               : ucp_am_send_nbx(s->ep, kFramePartAm, nullptr, 0,
                                                 parts[i - 1].first, parts[i - 1].second, &param);
    if (req == nullptr || UCS_PTR_IS_ERR(req)) --op->pending;  // done, or never started
    if (UCS_PTR_IS_ERR(req)) {
      if (--op->pending == 0) delete op;  // the guard
      drop(s, ucx_error("ucp_am_send_nbx", UCS_PTR_STATUS(req)));
      return;
    }
  }
  if (--op->pending == 0) delete op;  // the guard
}

void UcxTransport::close_now(const std::shared_ptr<UcxSession>& s) {
  if (s->ep == nullptr) return;
  ucp_ep_h ep = std::exchange(s->ep, nullptr);
  by_ep_.erase(ep);
  ucp_request_param_t param{};  // flush: queued sends go out first
  ucs_status_ptr_t req = ucp_ep_close_nbx(ep, &param);
  if (UCS_PTR_IS_PTR(req)) {
    // Let it finish in the background; the request frees itself on completion.
    param.op_attr_mask = 0;
    ucp_request_free(req);
  }
  s->on_channel_closed(absl::UnavailableError("the connection was closed"));
}

void UcxTransport::drop(const std::shared_ptr<UcxSession>& s, absl::Status why) {
  if (s->ep == nullptr) return;
  ucp_ep_h ep = std::exchange(s->ep, nullptr);
  by_ep_.erase(ep);
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = UCP_EP_CLOSE_FLAG_FORCE;
  ucs_status_ptr_t req = ucp_ep_close_nbx(ep, &param);
  if (UCS_PTR_IS_PTR(req)) ucp_request_free(req);
  s->on_channel_closed(std::move(why));
}

void UcxTransport::close_listener_now(ucp_listener_h l) {
  if (listeners_.erase(l) > 0) ucp_listener_destroy(l);
}

void UcxTransport::on_ep_error(void* arg, ucp_ep_h ep, ucs_status_t status) {
  auto* t = static_cast<UcxTransport*>(arg);
  auto it = t->by_ep_.find(ep);
  if (it == t->by_ep_.end()) return;
  std::shared_ptr<UcxSession> s = it->second;
  t->drop(s, absl::UnavailableError(ucs_status_string(status)));
}

std::shared_ptr<UcxSession> UcxTransport::session_of(const ucp_am_recv_param_t* param) {
  if ((param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) == 0) return nullptr;
  auto it = by_ep_.find(param->reply_ep);
  return it == by_ep_.end() ? nullptr : it->second;
}

ucs_status_t UcxTransport::on_frame_start(void* arg, const void*, size_t, void* data, size_t length,
                                          const ucp_am_recv_param_t* param) {
  auto* t = static_cast<UcxTransport*>(arg);
  std::shared_ptr<UcxSession> s = t->session_of(param);
  if (!s) return UCS_OK;
  if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) {
    s->on_bad_frame(absl::InvalidArgumentError("a frame start arrived by rendezvous"));
    return UCS_OK;
  }
  const FrameLimits& limits = t->options_.limits;
  std::span<const std::byte> bytes(static_cast<const std::byte*>(data), length);
  absl::StatusOr<FrameHeader> h = decode_header(bytes, limits);
  if (!h.ok()) {
    s->on_bad_frame(h.status());
    return UCS_OK;
  }
  size_t table_end = kFrameHeaderBytes + h->lengths_bytes();
  bool whole = length == h->total_bytes();
  if (length != table_end && !whole) {
    s->on_bad_frame(absl::InvalidArgumentError("frame start has the wrong size"));
    return UCS_OK;
  }
  absl::StatusOr<std::vector<uint64_t>> lengths =
      decode_lengths(*h, bytes.subspan(kFrameHeaderBytes), limits);
  if (!lengths.ok()) {
    s->on_bad_frame(lengths.status());
    return UCS_OK;
  }
  if (!s->incoming.empty() && s->incoming.back()->next_part < s->incoming.back()->parts.size()) {
    s->on_bad_frame(absl::InvalidArgumentError("a frame started before the last one was whole"));
    return UCS_OK;
  }
  auto in = std::make_unique<UcxSession::Incoming>();
  UcxSession::Incoming* raw = in.get();
  raw->frame.kind = h->kind;
  raw->frame.message = Buffer(h->message_bytes);
  if (!raw->frame.message.empty())
    raw->parts.emplace_back(raw->frame.message.data(), h->message_bytes);
  for (uint64_t len : *lengths) {
    raw->frame.buffers.emplace_back(len);
    if (len > 0) raw->parts.emplace_back(raw->frame.buffers.back().data(), len);
  }
  if (whole) {
    const std::byte* src = bytes.data() + table_end;
    for (auto [target, size] : raw->parts) {
      std::memcpy(target, src, size);
      src += size;
    }
    raw->parts.clear();
  }
  raw->complete = raw->parts.empty();
  s->incoming.push_back(std::move(in));
  if (raw->complete) s->deliver_completed();
  return UCS_OK;
}

ucs_status_t UcxTransport::on_frame_part(void* arg, const void*, size_t, void* data, size_t length,
                                         const ucp_am_recv_param_t* param) {
  auto* t = static_cast<UcxTransport*>(arg);
  std::shared_ptr<UcxSession> s = t->session_of(param);
  if (!s) return UCS_OK;
  if (s->incoming.empty() || s->incoming.back()->next_part >= s->incoming.back()->parts.size()) {
    s->on_bad_frame(absl::InvalidArgumentError("a frame part with no frame to belong to"));
    return UCS_OK;
  }
  t->receive_part(s, s->incoming.back().get(), data, length, param);
  return UCS_OK;
}

struct RecvOp {
  std::shared_ptr<UcxSession> session;
  UcxSession::Incoming* incoming;
};

void UcxTransport::part_received(const std::shared_ptr<UcxSession>& s, UcxSession::Incoming* in) {
  if (++in->parts_done == in->parts.size()) {
    in->complete = true;
    s->deliver_completed();
  }
}

// Receives the next part of `in`: copied now if it came eagerly, otherwise
// pulled by rendezvous straight into its buffer.
void UcxTransport::receive_part(const std::shared_ptr<UcxSession>& s, UcxSession::Incoming* in,
                                void* data, size_t length, const ucp_am_recv_param_t* param) {
  auto [target, size] = in->parts[in->next_part++];
  if (length != size) {
    s->on_bad_frame(absl::InvalidArgumentError(
        absl::StrCat("frame part of ", length, " bytes where ", size, " were announced")));
    return;
  }
  if ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) == 0) {
    std::memcpy(target, data, size);
    part_received(s, in);
    return;
  }
  auto* op = new RecvOp{s, in};
  ucp_request_param_t rp{};
  rp.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_DATATYPE;
  rp.datatype = ucp_dt_make_contig(1);
  rp.user_data = op;
  rp.cb.recv_am = [](void* request, ucs_status_t status, size_t, void* user) {
    auto* o = static_cast<RecvOp*>(user);
    if (status == UCS_OK) part_received(o->session, o->incoming);
    delete o;
    ucp_request_free(request);
  };
  ucs_status_ptr_t req = ucp_am_recv_data_nbx(worker_, data, target, size, &rp);
  if (req == nullptr) {
    delete op;
    part_received(s, in);
  } else if (UCS_PTR_IS_ERR(req)) {
    delete op;
    drop(s, ucx_error("ucp_am_recv_data_nbx", UCS_PTR_STATUS(req)));
  }
}

void UcxTransport::on_conn_request(ucp_conn_request_h request, void* arg) {
  auto* entry = static_cast<std::pair<UcxTransport*, std::shared_ptr<AcceptCallback>>*>(arg);
  UcxTransport* t = entry->first;
  ucp_conn_request_attr_t attr{};
  attr.field_mask = UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR;
  std::string peer = "ucx (unknown peer)";
  if (ucp_conn_request_query(request, &attr) == UCS_OK)
    peer = "ucx " + sockaddr_name(attr.client_address);
  ucp_ep_params_t ep{};
  ep.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST | UCP_EP_PARAM_FIELD_ERR_HANDLER |
                  UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  ep.conn_request = request;
  ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  ep.err_handler.cb = &UcxTransport::on_ep_error;
  ep.err_handler.arg = t;
  auto s = std::make_shared<UcxSession>(Role::kServer, t->options_, t->stats_, peer, t->link_);
  if (ucp_ep_create(t->worker_, &ep, &s->ep) != UCS_OK) return;
  s->set_accept(*entry->second);
  s->handshake_deadline = absl::Now() + t->options_.handshake_timeout;
  t->adopt(s);
  s->start();
}

absl::StatusOr<std::unique_ptr<Listener>> UcxTransport::listen(std::string_view address,
                                                               AcceptCallback on_accept) {
  absl::StatusOr<sockaddr_in> addr = to_sockaddr(address);
  if (!addr.ok()) return addr.status();
  std::promise<absl::StatusOr<std::pair<ucp_listener_h, std::string>>> result;
  auto cb = std::make_shared<AcceptCallback>(std::move(on_accept));
  post([&, cb] {
    // The conn handler's argument lives as long as the transport.
    auto* entry = new std::pair<UcxTransport*, std::shared_ptr<AcceptCallback>>(this, cb);
    accept_args_.emplace_back(entry);
    ucp_listener_params_t lp{};
    lp.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
    lp.sockaddr.addr = reinterpret_cast<const sockaddr*>(&*addr);
    lp.sockaddr.addrlen = sizeof(sockaddr_in);
    lp.conn_handler.cb = &UcxTransport::on_conn_request;
    lp.conn_handler.arg = entry;
    ucp_listener_h l = nullptr;
    if (ucs_status_t s = ucp_listener_create(worker_, &lp, &l); s != UCS_OK) {
      result.set_value(ucx_error(absl::StrCat("cannot listen on ", std::string(address)), s));
      return;
    }
    ucp_listener_attr_t attr{};
    attr.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
    ucp_listener_query(l, &attr);
    listeners_[l] = cb;
    result.set_value(std::make_pair(l, "ucx://" + sockaddr_name(attr.sockaddr)));
  });
  auto r = result.get_future().get();
  if (!r.ok()) return r.status();
  return std::unique_ptr<Listener>(new UcxListener(link_, r->first, r->second));
}

absl::StatusOr<std::shared_ptr<Connection>> UcxTransport::connect(std::string_view address,
                                                                  ConnectionCallbacks callbacks,
                                                                  absl::Duration timeout) {
  absl::StatusOr<sockaddr_in> addr = to_sockaddr(address);
  if (!addr.ok()) return addr.status();
  auto s = std::make_shared<UcxSession>(
      Role::kClient, options_, stats_, absl::StrCat("ucx ", std::string(address.substr(6))), link_);
  s->set_callbacks(std::move(callbacks));
  std::promise<absl::Status> created;
  post([&, s] {
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR |
                    UCP_EP_PARAM_FIELD_ERR_HANDLER | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    ep.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
    ep.sockaddr.addr = reinterpret_cast<const sockaddr*>(&*addr);
    ep.sockaddr.addrlen = sizeof(sockaddr_in);
    ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    ep.err_handler.cb = &UcxTransport::on_ep_error;
    ep.err_handler.arg = this;
    if (ucs_status_t st = ucp_ep_create(worker_, &ep, &s->ep); st != UCS_OK) {
      created.set_value(ucx_error(absl::StrCat("cannot connect to ", std::string(address)), st));
      return;
    }
    adopt(s);
    s->start();
    created.set_value(absl::OkStatus());
  });
  if (absl::Status st = created.get_future().get(); !st.ok()) return st;
  if (absl::Status ready = s->wait_ready(absl::Now() + timeout); !ready.ok()) return ready;
  return std::shared_ptr<Connection>(s);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Transport>> make_transport(TransportOptions options) {
  return UcxTransport::create(std::move(options));
}

}  // namespace troupe::transport::ucx
