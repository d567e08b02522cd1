#include "transport/collectives/routed_group.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "transport/collectives/detail/device_queue.h"

namespace troupe::transport {
namespace {

// Point-to-point tags are below 2^62 (group.h).
constexpr uint64_t kMaxUserTag = uint64_t{1} << 62;

// What each member publishes of its device: "host", "device <uuid>", or
// "unusable <why>".
constexpr absl::string_view kHost = "host";
constexpr absl::string_view kDevicePrefix = "device ";
constexpr absl::string_view kUnusablePrefix = "unusable ";

std::string device_key(const DeviceOptions& o, int rank) {
  return absl::StrCat(o.group, "/", o.generation, "/device/", rank);
}

std::string describe(const DeviceOptions& o) {
  return absl::StrCat("group '", o.group, "' generation ", o.generation, " rank ", o.rank, " of ",
                      o.size);
}

// The status `s` with `context: ` before its message, its code kept.
absl::Status with_context(const absl::Status& s, absl::string_view context) {
  return absl::Status(s.code(), absl::StrCat(context, ": ", s.message()));
}

}  // namespace

std::string_view to_string(DevicePath path) {
  switch (path) {
    case DevicePath::kNone:
      return "none";
    case DevicePath::kDevice:
      return "device";
    case DevicePath::kStaged:
      return "staged";
  }
  return "unknown";
}

absl::StatusOr<DeviceAgreement> RoutedGroup::agree(Store& store, DeviceOptions options) {
  DeviceAgreement agreement;
  const std::string name = describe(options);
  if (options.device < 0) {
    // Published for the members with a device: they stage for this one.
    options.device = -1;
    if (absl::Status s = store.set(device_key(options, options.rank), std::string(kHost));
        !s.ok()) {
      return s;
    }
    agreement.options = std::move(options);
    return agreement;
  }

  // This member's device.
  absl::Status usable;
  if (options.backend == nullptr) {
    absl::StatusOr<DeviceCollectives*> loaded = device_collectives();
    if (loaded.ok()) {
      options.backend = *loaded;
    } else {
      usable = loaded.status();
    }
  }
  std::string uuid;
  if (usable.ok()) usable = options.backend->check_device(options.device);
  if (usable.ok()) {
    absl::StatusOr<std::string> id = options.backend->device_uuid(options.device);
    if (id.ok()) {
      uuid = *std::move(id);
    } else {
      usable = id.status();
    }
  }
  if (!usable.ok()) {
    // The others fail at once rather than wait for a member that will not come.
    (void)store.set(device_key(options, options.rank),
                    absl::StrCat(kUnusablePrefix, usable.message()));
    return absl::FailedPreconditionError(
        absl::StrCat(name, ": cannot use device ", options.device, ": ", usable.message()));
  }
  if (absl::Status s =
          store.set(device_key(options, options.rank), absl::StrCat(kDevicePrefix, uuid));
      !s.ok()) {
    return s;
  }

  // Every member's.
  const absl::Time deadline = absl::Now() + options.timeout;
  std::map<std::string, int> first_on;  // a device's UUID -> the first rank on it
  std::string why;
  for (int r = 0; r < options.size; ++r) {
    absl::StatusOr<std::string> text = store.wait_get(
        device_key(options, r), std::max(deadline - absl::Now(), absl::ZeroDuration()));
    if (!text.ok()) {
      return with_context(text.status(), absl::StrCat(name, ": waiting for rank ", r, "'s device"));
    }
    if (absl::StartsWith(*text, kUnusablePrefix)) {
      return absl::FailedPreconditionError(
          absl::StrCat(name, ": rank ", r, " cannot use its device (",
                       text->substr(kUnusablePrefix.size()), "), so the group cannot form"));
    }
    if (*text == kHost) {
      if (why.empty()) why = absl::StrCat("rank ", r, " has no device");
      continue;
    }
    if (!absl::StartsWith(*text, kDevicePrefix)) {
      return absl::InternalError(
          absl::StrCat(name, ": rank ", r, " published a malformed device '", *text, "'"));
    }
    std::string id = text->substr(kDevicePrefix.size());
    auto [it, first] = first_on.emplace(id, r);
    if (!first && why.empty()) {
      why = absl::StrCat("ranks ", it->second, " and ", r, " share device ", id);
    }
  }
  agreement.path = why.empty() ? DevicePath::kDevice : DevicePath::kStaged;
  agreement.why = std::move(why);
  agreement.options = std::move(options);
  return agreement;
}

absl::StatusOr<std::unique_ptr<RoutedGroup>> RoutedGroup::create(std::unique_ptr<Group> host,
                                                                 Store& store,
                                                                 const DeviceAgreement& agreement) {
  std::unique_ptr<RoutedGroup> g(new RoutedGroup(std::move(host), agreement));
  if (agreement.path != DevicePath::kDevice) return g;
  const DeviceOptions& o = agreement.options;
  absl::StatusOr<std::unique_ptr<DeviceCommunicator>> comm =
      o.backend->create_communicator(store, {.rank = g->rank(),
                                             .size = g->size(),
                                             .group = o.group,
                                             .generation = o.generation,
                                             .device = o.device,
                                             .timeout = o.timeout});
  if (!comm.ok()) return comm.status();
  g->device_ = std::make_unique<detail::DeviceQueue>(*std::move(comm), *g->host_, o.timeout);
  return g;
}

RoutedGroup::RoutedGroup(std::unique_ptr<Group> host, DeviceAgreement agreement)
    : agreement_(std::move(agreement)),
      backend_(agreement_.path == DevicePath::kNone ? nullptr : agreement_.options.backend),
      host_(std::move(host)) {}

RoutedGroup::~RoutedGroup() {
  device_.reset();
  host_.reset();
}

absl::StatusOr<int> RoutedGroup::locate(const char* op,
                                        std::initializer_list<const void*> buffers) const {
  if (backend_ == nullptr) return kHostMemory;
  int where = kHostMemory;
  bool first = true;
  for (const void* buffer : buffers) {
    if (buffer == nullptr) continue;
    const int on = backend_->device_of(buffer, device());
    if (first) {
      where = on;
      first = false;
    } else if (on != where) {
      return absl::InvalidArgumentError(absl::StrCat(
          op, " on rank ", rank(), ": one buffer in ",
          where == kHostMemory ? "host memory" : absl::StrCat("device ", where, "'s"),
          " and another in ", on == kHostMemory ? "host memory" : absl::StrCat("device ", on, "'s"),
          " (an operation's buffers are all on one side)"));
    }
  }
  if (where != kHostMemory && where != device()) {
    return absl::InvalidArgumentError(absl::StrCat(op, " on rank ", rank(), ": a buffer on device ",
                                                   where, ", and this member's device is ",
                                                   device()));
  }
  return where;
}

absl::Status RoutedGroup::check_peer(const char* op, int peer, uint64_t tag) const {
  if (peer < 0 || peer >= size() || tag >= kMaxUserTag) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, " rank ", peer, " of ", size(), " with tag ", tag));
  }
  if (peer == rank() && path() == DevicePath::kDevice) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, " rank ", peer, ": itself, from device memory (copy it instead)"));
  }
  return absl::OkStatus();
}

Work RoutedGroup::on_device(
    absl::FunctionRef<std::unique_ptr<DeviceOperation>(DeviceCommunicator&)> issue) {
  Work staged_before;
  {
    std::lock_guard<std::mutex> lock(order_mu_);
    staged_before = last_staged_;
  }
  if (!staged_before.done()) (void)staged_before.wait();
  return device_->submit(issue);
}

Work RoutedGroup::staged(Group::Kind kind, const void* in, size_t in_bytes, bool copy_in, void* out,
                         size_t out_bytes, bool copy_out,
                         std::function<absl::Status(Communicator&, const void*, void*)> run) {
  Work device_before = device_ != nullptr ? device_->last() : Work::done_with(absl::OkStatus());
  DeviceCollectives* backend = backend_;
  const int device = this->device();
  const bool one_buffer = in == out;
  Work work = host_->run_async(kind, [=, run = std::move(run)](Communicator& c) -> absl::Status {
    (void)device_before.wait();  // it has failed the group if it went wrong
    std::vector<std::byte> host_in(one_buffer ? std::max(in_bytes, out_bytes) : in_bytes);
    std::vector<std::byte> host_out(one_buffer ? 0 : out_bytes);
    void* staged_in = host_in.data();
    void* staged_out = one_buffer ? staged_in : host_out.data();
    if (copy_in && in_bytes > 0) {
      if (absl::Status s = backend->copy_to_host(staged_in, in, in_bytes, device); !s.ok()) {
        c.abort(s);  // the others are in the operation already
        return s;
      }
    }
    absl::Status s = run(c, staged_in, staged_out);
    if (s.ok() && copy_out && out_bytes > 0) {
      s = backend->copy_to_device(out, staged_out, out_bytes, device);
      if (!s.ok()) c.abort(s);
    }
    return s;
  });
  if (device_ != nullptr) {
    std::lock_guard<std::mutex> lock(order_mu_);
    last_staged_ = work;
  }
  return work;
}

Work RoutedGroup::allreduce_async(DType type, ReduceOp op, void* data, size_t count,
                                  Algorithm algorithm) {
  absl::StatusOr<int> where = locate("allreduce", {data});
  if (!where.ok()) return Work::done_with(where.status());
  if (*where == kHostMemory) return host_->allreduce_async(type, op, data, count, algorithm);
  if (path() == DevicePath::kDevice) {
    device_collectives_.fetch_add(1);
    return on_device([&](DeviceCommunicator& c) { return c.allreduce(type, op, data, count); });
  }
  const size_t bytes = count * element_size(type);
  return staged(Group::Kind::kAllreduce, data, bytes, true, data, bytes, true,
                [=](Communicator& c, const void*, void* staged) {
                  return transport::allreduce(c, type, op, staged, count, algorithm);
                });
}

Work RoutedGroup::reduce_scatter_async(DType type, ReduceOp op, const void* input, void* output,
                                       size_t count) {
  absl::StatusOr<int> where = locate("reduce_scatter", {input, output});
  if (!where.ok()) return Work::done_with(where.status());
  if (*where == kHostMemory) return host_->reduce_scatter_async(type, op, input, output, count);
  if (path() == DevicePath::kDevice) {
    device_collectives_.fetch_add(1);
    return on_device(
        [&](DeviceCommunicator& c) { return c.reduce_scatter(type, op, input, output, count); });
  }
  const size_t bytes = count * element_size(type);
  return staged(Group::Kind::kReduceScatter, input, bytes * static_cast<size_t>(size()), true,
                output, bytes, true, [=](Communicator& c, const void* staged_in, void* staged_out) {
                  return transport::reduce_scatter(c, type, op, staged_in, staged_out, count);
                });
}

Work RoutedGroup::allgather_async(const void* input, void* output, size_t bytes) {
  absl::StatusOr<int> where = locate("allgather", {input, output});
  if (!where.ok()) return Work::done_with(where.status());
  if (*where == kHostMemory) return host_->allgather_async(input, output, bytes);
  if (path() == DevicePath::kDevice) {
    device_collectives_.fetch_add(1);
    return on_device([&](DeviceCommunicator& c) { return c.allgather(input, output, bytes); });
  }
  return staged(Group::Kind::kAllgather, input, bytes, true, output,
                bytes * static_cast<size_t>(size()), true,
                [=](Communicator& c, const void* staged_in, void* staged_out) {
                  return transport::allgather(c, staged_in, staged_out, bytes);
                });
}

Work RoutedGroup::reduce_scatter_v_async(DType type, ReduceOp op, const void* input, void* output,
                                         std::span<const size_t> counts) {
  absl::StatusOr<int> where = locate("reduce_scatter_v", {input, output});
  if (!where.ok()) return Work::done_with(where.status());
  if (*where == kHostMemory) return host_->reduce_scatter_v_async(type, op, input, output, counts);
  if (counts.size() != static_cast<size_t>(size())) {
    return Work::done_with(absl::InvalidArgumentError(
        absl::StrCat("reduce_scatter_v: ", counts.size(), " block sizes for a group of ", size())));
  }
  const size_t element = element_size(type);
  const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
  return staged(Group::Kind::kReduceScatter, input, total * element, true, output,
                counts[static_cast<size_t>(rank())] * element, true,
                [=, counts = std::vector<size_t>(counts.begin(), counts.end())](
                    Communicator& c, const void* staged_in, void* staged_out) {
                  return transport::reduce_scatter_v(c, type, op, staged_in, staged_out, counts);
                });
}

Work RoutedGroup::allgather_v_async(const void* input, void* output,
                                    std::span<const size_t> bytes) {
  absl::StatusOr<int> where = locate("allgather_v", {input, output});
  if (!where.ok()) return Work::done_with(where.status());
  if (*where == kHostMemory) return host_->allgather_v_async(input, output, bytes);
  if (bytes.size() != static_cast<size_t>(size())) {
    return Work::done_with(absl::InvalidArgumentError(
        absl::StrCat("allgather_v: ", bytes.size(), " block sizes for a group of ", size())));
  }
  const size_t total = std::accumulate(bytes.begin(), bytes.end(), size_t{0});
  return staged(Group::Kind::kAllgather, input, bytes[static_cast<size_t>(rank())], true, output,
                total, true,
                [=, bytes = std::vector<size_t>(bytes.begin(), bytes.end())](
                    Communicator& c, const void* staged_in, void* staged_out) {
                  return transport::allgather_v(c, staged_in, staged_out, bytes);
                });
}

Work RoutedGroup::broadcast_async(void* data, size_t bytes, int root) {
  absl::StatusOr<int> where = locate("broadcast", {data});
  if (!where.ok()) return Work::done_with(where.status());
  if (*where == kHostMemory) return host_->broadcast_async(data, bytes, root);
  if (path() == DevicePath::kDevice) {
    device_collectives_.fetch_add(1);
    return on_device([&](DeviceCommunicator& c) { return c.broadcast(data, bytes, root); });
  }
  const bool is_root = root == rank();
  return staged(Group::Kind::kOther, data, bytes, is_root, data, bytes, !is_root,
                [=](Communicator& c, const void*, void* staged) {
                  return transport::broadcast(c, staged, bytes, root);
                });
}

Work RoutedGroup::send_async(int peer, uint64_t tag, const void* data, size_t bytes) {
  absl::StatusOr<int> where = locate("send", {data});
  if (!where.ok()) return Work::done_with(where.status());
  if (*where == kHostMemory) return host_->send_async(peer, tag, data, bytes);
  if (absl::Status s = check_peer("send to", peer, tag); !s.ok()) {
    return Work::done_with(std::move(s));
  }
  if (path() == DevicePath::kDevice) {
    return on_device([&](DeviceCommunicator& c) { return c.send(peer, data, bytes); });
  }
  // Staged: copied now, as a host send copies at once.
  std::vector<std::byte> copy(bytes);
  if (bytes > 0) {
    if (absl::Status s = backend_->copy_to_host(copy.data(), data, bytes, device()); !s.ok()) {
      return Work::done_with(std::move(s));
    }
  }
  return host_->send_async(peer, tag, copy.data(), bytes);
}

Work RoutedGroup::send_borrowed_async(int peer, uint64_t tag, const void* data, size_t bytes) {
  absl::StatusOr<int> where = locate("send", {data});
  if (!where.ok()) return Work::done_with(where.status());
  if (*where == kHostMemory) return host_->send_borrowed_async(peer, tag, data, bytes);
  return send_async(peer, tag, data, bytes);
}

Work RoutedGroup::recv_async(int peer, uint64_t tag, void* data, size_t bytes) {
  absl::StatusOr<int> where = locate("recv", {data});
  if (!where.ok()) return Work::done_with(where.status());
  if (*where == kHostMemory) return host_->recv_async(peer, tag, data, bytes);
  if (absl::Status s = check_peer("recv from", peer, tag); !s.ok()) {
    return Work::done_with(std::move(s));
  }
  if (path() == DevicePath::kDevice) {
    return on_device([&](DeviceCommunicator& c) { return c.recv(peer, data, bytes); });
  }
  // Staged: received into host memory, then copied to the device in the
  // next turn of the host group's worker (so right after the receive).
  auto staging = std::make_shared<std::vector<std::byte>>(bytes);
  Work received = host_->recv_async(peer, tag, staging->data(), bytes);
  DeviceCollectives* backend = backend_;
  const int device = this->device();
  return host_->run_async(
      Group::Kind::kOther,
      [=](Communicator&) -> absl::Status {
        absl::Status s = received.wait();
        if (s.ok() && bytes > 0) s = backend->copy_to_device(data, staging->data(), bytes, device);
        return s;
      },
      /*collective=*/false);
}

Work RoutedGroup::recv_in_place_async(int peer, uint64_t tag, void* data, size_t bytes) {
  absl::StatusOr<int> where = locate("recv", {data});
  if (!where.ok()) return Work::done_with(where.status());
  if (*where == kHostMemory) return host_->recv_in_place_async(peer, tag, data, bytes);
  return recv_async(peer, tag, data, bytes);
}

void RoutedGroup::abort(const absl::Status& why, const std::vector<int>& lost) {
  host_->abort(why, lost);
  if (device_ != nullptr) device_->abort(why);
}

absl::Status RoutedGroup::failed() const {
  if (absl::Status failed = host_->failed(); !failed.ok()) return failed;
  return device_ != nullptr ? device_->failure() : absl::OkStatus();
}

uint64_t RoutedGroup::collectives_issued() const {
  return host_->collectives_issued() + device_collectives_.load();
}

}  // namespace troupe::transport
