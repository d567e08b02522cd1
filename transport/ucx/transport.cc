// The ucx transport's life: the UCP context and worker it creates, the
// environment UCX reads when it does, and its shutdown. (How the rest is
// spread over the other files: detail/transport.h.)
#include "transport/ucx/transport.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/eventfd.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string_view>
#include <thread>
#include <utility>

#include "transport/tcp/transport.h"
#include "transport/ucx/detail/transport.h"

namespace troupe::transport::ucx {
namespace {

// Large parts on one host move by a single copy: the receiver reads them out
// of the sender's memory with CMA (process_vm_readv) instead of the sender
// copying them into a shared-memory FIFO and the receiver copying them out.
// UCX 1.13 lets endpoints with peer-failure handling use a memory domain for
// rendezvous only if it can invalidate registered memory, so that a failed
// peer can no longer reach it, and CMA claims that only when told to
// (UCX_CMA_MEMORY_INVALIDATE; its invalidation does nothing). So rendezvous
// is pinned to get_zcopy, where the receiver reads: a peer only ever reads
// memory we send from, never writes ours. (Under the put scheme a peer
// writes into the receiver's buffer, which a failed receive may already have
// handed back.) Both sides of an endpoint must choose alike - UCX aborts the
// process when a peer's lanes differ from ours - so this goes through the
// environment, as the error-handling settings do, and a user's values win:
// with any other scheme CMA stays off.
void enable_single_copy() {
  const char* scheme = std::getenv("UCX_RNDV_SCHEME");
  if (scheme != nullptr && std::string_view(scheme) != "get_zcopy") return;
  ::setenv("UCX_RNDV_SCHEME", "get_zcopy", /*overwrite=*/0);
  ::setenv("UCX_CMA_MEMORY_INVALIDATE", "y", /*overwrite=*/0);
}

}  // namespace

UcxTransport::~UcxTransport() {
  {
    std::lock_guard<std::mutex> lock(link_->mu);
    link_->transport = nullptr;
  }
  link_->live.store(nullptr, std::memory_order_seq_cst);
  while (link_->visitors.load(std::memory_order_seq_cst) > 0)
    std::this_thread::yield();
  side_.reset();  // side channels close; their callbacks post nothing any more
  if (thread_.joinable()) {
    post([this] { stopping_ = true; });
    thread_.join();
  }
  if (address_ != nullptr) ucp_worker_release_address(worker_, address_);
  if (worker_ != nullptr) ucp_worker_destroy(worker_);
  if (context_ != nullptr) ucp_cleanup(context_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

const TransportStats& UcxTransport::stats() const {
  auto sum = [](const std::atomic<uint64_t>& a, const std::atomic<uint64_t>& b) {
    return a.load(std::memory_order_relaxed) + b.load(std::memory_order_relaxed);
  };
  combined_.connections_accepted.store(stats_->connections_accepted.load());
  combined_.connections_refused.store(
      sum(stats_->connections_refused, side_stats_->connections_refused));
  combined_.bad_frames.store(sum(stats_->bad_frames, side_stats_->bad_frames));
  combined_.frames_sent.store(stats_->frames_sent.load());
  combined_.frames_received.store(stats_->frames_received.load());
  return combined_;
}

namespace {

// The name of the network interface that has IPv4 or IPv6 address `host`
// ("127.0.0.1" -> "lo"); empty if none has it, or for no host or a wildcard.
std::string interface_of(const std::string& host) {
  if (host.empty() || host == "0.0.0.0" || host == "::") return "";
  in6_addr want6{};
  in_addr want4{};
  bool v4 = ::inet_pton(AF_INET, host.c_str(), &want4) == 1;
  bool v6 = !v4 && ::inet_pton(AF_INET6, host.c_str(), &want6) == 1;
  if (!v4 && !v6) return "";
  ifaddrs* all = nullptr;
  if (::getifaddrs(&all) != 0) return "";
  std::string name;
  for (ifaddrs* i = all; i != nullptr && name.empty(); i = i->ifa_next) {
    if (i->ifa_addr == nullptr) continue;
    if (v4 && i->ifa_addr->sa_family == AF_INET &&
        reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr == want4.s_addr) {
      name = i->ifa_name;
    } else if (v6 && i->ifa_addr->sa_family == AF_INET6 &&
               std::memcmp(&reinterpret_cast<sockaddr_in6*>(i->ifa_addr)->sin6_addr, &want6,
                           sizeof(want6)) == 0) {
      name = i->ifa_name;
    }
  }
  ::freeifaddrs(all);
  return name;
}

}  // namespace

absl::Status UcxTransport::init() {
  // Endpoints ask for peer-failure reports; UCX's shared-memory transports
  // offer them only when told to, through the environment. A user's value
  // wins. Once per process: setenv must not race another thread's getenv.
  static std::once_flag environment_set;
  std::call_once(environment_set, [] {
    ::setenv("UCX_POSIX_ERROR_HANDLING", "y", /*overwrite=*/0);
    ::setenv("UCX_SYSV_ERROR_HANDLING", "y", /*overwrite=*/0);
    enable_single_copy();
  });
  side_ = tcp::make_transport(options_, side_stats_);

  ucp_config_t* config = nullptr;
  if (ucs_status_t s = ucp_config_read(nullptr, nullptr, &config); s != UCS_OK) {
    return ucx_error("ucp_config_read", s);
  }
  if (std::string device = interface_of(options_.host);
      !device.empty() && std::getenv("UCX_NET_DEVICES") == nullptr) {
    if (ucs_status_t s = ucp_config_modify(config, "NET_DEVICES", device.c_str()); s != UCS_OK) {
      ucp_config_release(config);
      return ucx_error("ucp_config_modify(NET_DEVICES)", s);
    }
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_REQUEST_SIZE;
  params.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
  params.request_size = sizeof(InlineSend);
  ucs_status_t s = ucp_init(&params, config, &context_);
  ucp_config_release(config);
  if (s != UCS_OK) return ucx_error("ucp_init", s);

  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SINGLE;
  if (s = ucp_worker_create(context_, &wp, &worker_); s != UCS_OK) {
    return ucx_error("ucp_worker_create", s);
  }
  if (s = ucp_worker_get_address(worker_, &address_, &address_length_); s != UCS_OK) {
    return ucx_error("ucp_worker_get_address", s);
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
  link_->live.store(this, std::memory_order_seq_cst);
  thread_ = std::thread([this] { run(); });
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Transport>> make_transport(TransportOptions options) {
  return UcxTransport::create(std::move(options));
}

}  // namespace troupe::transport::ucx
