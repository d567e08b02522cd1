#include "transport/collectives/communicator.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <numeric>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "spdlog/spdlog.h"
#include "transport/collectives/detail/shared_segment.h"
#include "transport/detail/cpu_relax.h"

namespace troupe::transport {
namespace {

// Every frame is [header, payload]: the header names the sender and tag.
struct Header {
  uint64_t tag;
  uint32_t rank;
  uint32_t kind;  // kHello once per connection from the connecting side, then kData
};
constexpr uint32_t kHello = 0;
constexpr uint32_t kData = 1;
constexpr uint32_t kAbort = 2;  // the payload is the reason

Frame make_frame(uint32_t kind, int rank, uint64_t tag, Buffer payload) {
  Header h{tag, static_cast<uint32_t>(rank), kind};
  Frame f;
  f.buffers.push_back(Buffer::copy_of({reinterpret_cast<const std::byte*>(&h), sizeof(h)}));
  f.buffers.push_back(std::move(payload));
  return f;
}

std::string key(const CommunicatorOptions& o, const std::string& what) {
  return absl::StrCat(o.group, "/", o.generation, "/", what);
}

// The communicator whose transport this thread drives now (see Driving).
thread_local const Communicator* tls_driven = nullptr;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> Communicator::create(Transport& transport,
                                                                   Store& store,
                                                                   CommunicatorOptions options) {
  if (options.size < 1 || options.rank < 0 || options.rank >= options.size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", options.rank, " of ", options.size, " is not a valid member"));
  }
  if (options.host.empty()) {
    char name[256] = {};
    if (gethostname(name, sizeof(name) - 1) != 0) return absl::InternalError("gethostname failed");
    options.host = name;
  }
  std::unique_ptr<Communicator> c(new Communicator(std::move(options)));
  const CommunicatorOptions& o = c->options_;
  c->peers_.resize(o.size);
  Shared& sh = *c->shared_;
  sh.accepted.resize(o.size);
  sh.group = o.group;
  std::weak_ptr<Shared> weak = c->shared_;
  auto listener = transport.listen(o.listen_address, [weak](std::shared_ptr<Connection> conn) {
    // The connecting rank's first frame (a hello) says who it is.
    std::weak_ptr<Connection> weak_conn = conn;
    return ConnectionCallbacks{[weak, weak_conn](Frame& f) {
                                 if (auto s = weak.lock()) s->deliver(f, weak_conn.lock());
                               },
                               [weak](absl::Status why) {
                                 if (auto s = weak.lock()) s->lost(-1, why);
                               }};
  });
  if (!listener.ok()) return listener.status();
  c->listener_ = *std::move(listener);
  if (absl::Status s = store.set(key(o, absl::StrCat("rank/", o.rank)), c->listener_->address());
      !s.ok()) {
    return s;
  }
  if (absl::Status s = store.set(key(o, absl::StrCat("host/", o.rank)), o.host); !s.ok()) return s;
  absl::Time deadline = absl::Now() + o.timeout;
  c->hosts_.resize(o.size);
  for (int peer = 0; peer < o.size; ++peer) {
    auto host = store.wait_get(key(o, absl::StrCat("host/", peer)), deadline - absl::Now());
    if (!host.ok()) return host.status();
    c->hosts_[peer] = *std::move(host);
  }
  // Connect to every lower rank; higher ranks connect to us.
  for (int peer = 0; peer < o.rank; ++peer) {
    auto address = store.wait_get(key(o, absl::StrCat("rank/", peer)), deadline - absl::Now());
    if (!address.ok()) return address.status();
    auto conn = transport.connect(*address, c->callbacks(peer), deadline - absl::Now());
    if (!conn.ok()) return conn.status();
    if (absl::Status s = (*conn)->send(make_frame(kHello, o.rank, 0, Buffer())); !s.ok()) return s;
    c->peers_[peer] = *conn;
  }
  std::unique_lock<std::mutex> lock(sh.mu);
  bool all = sh.arrived.wait_until(lock, absl::ToChronoTime(deadline), [&] {
    for (int peer = o.rank + 1; peer < o.size; ++peer) {
      if (!sh.accepted[peer]) return false;
    }
    return true;
  });
  if (!all) {
    return absl::DeadlineExceededError(absl::StrCat("rank ", o.rank, " of group ", o.group,
                                                    ": not every rank connected within ",
                                                    absl::FormatDuration(o.timeout)));
  }
  for (int peer = o.rank + 1; peer < o.size; ++peer)
    c->peers_[peer] = sh.accepted[peer];
  lock.unlock();
  const auto local_ranks = std::count(c->hosts_.begin(), c->hosts_.end(), o.host);
  c->crowded_ = local_ranks > static_cast<long>(std::max(1u, std::thread::hardware_concurrency()));
  // Every connection comes from one transport: if it lets waiting threads
  // run its I/O, they may run these connections' callbacks too.
  for (const auto& p : c->peers_) {
    if (auto* direct_io = dynamic_cast<DirectIo*>(p.get())) {
      direct_io->allow_driving();
      direct_io->set_placement([weak](std::span<const Buffer> earlier, size_t bytes) {
        auto s = weak.lock();
        return s ? s->place(earlier, bytes) : Buffer();
      });
      c->direct_io_ = direct_io;
    }
  }
  if (o.shared_memory && o.size > 1 && local_ranks == o.size) {
    std::vector<int> members(static_cast<size_t>(o.size));
    std::iota(members.begin(), members.end(), 0);
    auto segment = detail::SharedSegment::create(store, key(o, "local"), members, o.rank,
                                                 deadline - absl::Now());
    if (segment.ok()) {
      c->shared_segment_ = *std::move(segment);
    } else if (absl::IsUnavailable(segment.status())) {
      // Every rank learns the same, and all use the transport instead.
      spdlog::warn(
          "group {}: no shared memory between its ranks, collectives use the transport: {}",
          o.group, segment.status().ToString());
    } else {
      return segment.status();
    }
  }
  return c;
}

Communicator::~Communicator() {
  if (listener_) listener_->close();
  for (auto& p : peers_) {
    if (p) p->close();
  }
}

ConnectionCallbacks Communicator::callbacks(int peer) {
  std::weak_ptr<Shared> weak = shared_;
  return ConnectionCallbacks{[weak](Frame& f) {
                               if (auto s = weak.lock()) s->deliver(f, nullptr);
                             },
                             [weak, peer](absl::Status why) {
                               if (auto s = weak.lock()) s->lost(peer, why);
                             }};
}

void Communicator::Shared::deliver(Frame& frame, const std::shared_ptr<Connection>& from) {
  Header h{};
  if (frame.buffers.size() != 2 || frame.buffers[0].size() != sizeof(h)) return;
  std::memcpy(&h, frame.buffers[0].data(), sizeof(h));
  {
    std::lock_guard<std::mutex> lock(mu);
    if (h.kind == kHello) {
      if (from && h.rank < accepted.size()) accepted[h.rank] = from;
    } else if (h.kind == kData) {
      // Once failed, nothing will be received: drop (and so release) it.
      if (failed.ok()) {
        inbox[{static_cast<int>(h.rank), h.tag}].push_back(std::move(frame.buffers[1]));
        arrivals.fetch_add(1, std::memory_order_release);
      }
    } else if (h.kind == kAbort && failed.ok()) {
      const Buffer& why = frame.buffers[1];
      failed = absl::AbortedError(
          absl::StrCat("rank ", h.rank, " aborted the group: ",
                       std::string(reinterpret_cast<const char*>(why.data()), why.size())));
      inbox.clear();
      arrivals.fetch_add(1, std::memory_order_release);
    }
  }
  arrived.notify_all();
}

Buffer Communicator::Shared::place(std::span<const Buffer> earlier, size_t bytes) {
  Header h{};
  if (earlier.size() != 1 || earlier[0].size() != sizeof(h)) return Buffer();
  std::memcpy(&h, earlier[0].data(), sizeof(h));
  if (h.kind != kData) return Buffer();
  std::lock_guard<std::mutex> lock(mu);
  auto it = placements.find({static_cast<int>(h.rank), h.tag});
  if (it == placements.end() || it->second.size() != bytes) return Buffer();
  Buffer target = std::move(it->second);
  placements.erase(it);
  return target;
}

void Communicator::Shared::lost(int peer, const absl::Status& why) {
  // An orderly close is a member that finished; anything else a member lost.
  if (why.ok()) return;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (failed.ok()) {
      // The group is aborted: every member's operations fail alike.
      failed = absl::AbortedError(
          absl::StrCat("a member of group ", group,
                       peer >= 0 ? absl::StrCat(" (rank ", peer, ")") : std::string(),
                       " was lost: ", why.message()));
      inbox.clear();
      arrivals.fetch_add(1, std::memory_order_release);
    }
  }
  arrived.notify_all();
}

absl::Status Communicator::send(int peer, uint64_t tag, Buffer data) {
  Shared& sh = *shared_;
  {
    std::lock_guard<std::mutex> lock(sh.mu);
    if (!sh.failed.ok()) return sh.failed;
    if (peer == options_.rank) {
      sh.inbox[{peer, tag}].push_back(std::move(data));
      sh.arrivals.fetch_add(1, std::memory_order_release);
      sh.arrived.notify_all();
      return absl::OkStatus();
    }
  }
  const size_t bytes = data.size();
  absl::Status sent = peers_[peer]->send(make_frame(kData, options_.rank, tag, std::move(data)));
  if (sent.ok()) {
    bytes_sent_.fetch_add(bytes, std::memory_order_relaxed);
    return sent;
  }
  // A peer that can no longer be reached is a member lost: the group fails
  // as a whole, with Aborted, as when its connection breaks (lost()).
  sh.lost(peer, sent);
  std::lock_guard<std::mutex> lock(sh.mu);
  return sh.failed;
}

absl::StatusOr<Buffer> Communicator::recv(int peer, uint64_t tag) {
  Shared& sh = *shared_;
  const std::pair<int, uint64_t> key{peer, tag};
  // The inbox is looked up afresh each time: a failure clears it.
  auto ready = [&] { return !sh.failed.ok() || sh.inbox.contains(key); };
  std::unique_lock<std::mutex> lock(sh.mu);
  if (!ready()) {
    uint64_t seen = sh.arrivals.load(std::memory_order_relaxed);
    lock.unlock();
    bool spun = false;
    for (Spinner spin(*this); spin.next();) {
      uint64_t now = sh.arrivals.load(std::memory_order_acquire);
      if (now == seen) continue;
      seen = now;
      lock.lock();
      if (ready()) {
        spun = true;
        break;
      }
      lock.unlock();
    }
    if (!spun) {
      const absl::Time deadline = absl::Now() + options_.timeout;
      Blocked blocked(*this);
      lock.lock();
      sh.arrived.wait_until(lock, absl::ToChronoTime(deadline), ready);
    }
  }
  if (!sh.failed.ok()) return sh.failed;
  auto it = sh.inbox.find(key);
  if (it == sh.inbox.end()) {
    return absl::DeadlineExceededError(absl::StrCat("rank ", options_.rank, ": nothing from rank ",
                                                    peer, " within ",
                                                    absl::FormatDuration(options_.timeout)));
  }
  Buffer b = std::move(it->second.front());
  it->second.erase(it->second.begin());
  if (it->second.empty()) sh.inbox.erase(it);
  return b;
}

Communicator::Driving::Driving(Communicator& comm) {
  if (tls_driven != nullptr || comm.direct_io_ == nullptr) return;  // nested, or cannot
  tls_driven = &comm;
  began_ = &comm;
  comm.direct_io_->begin_driving();
}

Communicator::Driving::~Driving() {
  if (began_ == nullptr) return;
  tls_driven = nullptr;
  began_->direct_io_->end_driving(/*blocking=*/false);
}

Communicator::Spinner::Spinner(Communicator& comm)
    : direct_io_(tls_driven == &comm ? comm.direct_io_ : nullptr), crowded_(comm.crowded_) {}

bool Communicator::Spinner::next() {
  if (direct_io_ != nullptr && direct_io_->poll()) {
    idle_ = 0;
    give_out_ns_ = 0;
    return true;
  }
  ++idle_;
  // Not driving: the transport's I/O thread delivers, and may want this
  // core. Driving: so may the rank this one waits for, if it shares the core
  // (as it must on a crowded host, and may on a busy one). A yield nobody
  // takes costs a system call; one taken costs a time slice, so not too often.
  if (direct_io_ == nullptr || idle_ % (crowded_ ? 4 : 16) == 0) {
    sched_yield();
  } else {
    detail::cpu_relax();
  }
  if (idle_ % 8 != 0) return true;
  // The clock is read now and then: the budget starts at the first reading.
  int64_t now = now_ns();
  if (give_out_ns_ == 0) give_out_ns_ = now + kSpinMicros * 1000;
  return now < give_out_ns_;
}

Communicator::Blocked::Blocked(Communicator& comm)
    : direct_io_(tls_driven == &comm ? comm.direct_io_ : nullptr) {
  if (direct_io_ != nullptr) direct_io_->end_driving(/*blocking=*/true);
}

Communicator::Blocked::~Blocked() {
  if (direct_io_ != nullptr) direct_io_->begin_driving();
}

void Communicator::place(int peer, uint64_t tag, Buffer target) {
  if (direct_io_ == nullptr || peer == options_.rank) return;  // nothing would place it
  std::lock_guard<std::mutex> lock(shared_->mu);
  if (shared_->inbox.contains({peer, tag})) return;  // `target` is let go of on return
  shared_->placements.try_emplace({peer, tag}, std::move(target));
}

void Communicator::unplace(int peer, uint64_t tag, const void* target) {
  Buffer unused;  // released outside the lock
  std::lock_guard<std::mutex> lock(shared_->mu);
  auto it = shared_->placements.find({peer, tag});
  if (it == shared_->placements.end() || it->second.data() != target) return;
  unused = std::move(it->second);
  shared_->placements.erase(it);
}

void Communicator::clear_placements() {
  decltype(Shared::placements) unused;  // released outside the lock
  std::lock_guard<std::mutex> lock(shared_->mu);
  if (!shared_->placements.empty()) unused.swap(shared_->placements);
}

absl::Status Communicator::failed() const {
  std::lock_guard<std::mutex> lock(shared_->mu);
  return shared_->failed;
}

void Communicator::abort(const absl::Status& why, const std::vector<int>& lost) {
  Shared& sh = *shared_;
  std::string reason = why.message().empty() ? "the group was aborted" : std::string(why.message());
  for (int r : lost) {
    if (r >= 0 && r < static_cast<int>(peers_.size()) && peers_[r]) {
      peers_[r]->abort(absl::AbortedError(reason));
    }
  }
  {
    std::lock_guard<std::mutex> lock(sh.mu);
    if (!sh.failed.ok()) return;
    sh.failed = absl::AbortedError(reason);
    sh.inbox.clear();
    sh.arrivals.fetch_add(1, std::memory_order_release);
  }
  sh.arrived.notify_all();
  // Every other member fails its pending operations too (best effort: a
  // member that is gone learns nothing, and needs nothing).
  for (auto& p : peers_) {
    if (!p) continue;
    Buffer text =
        Buffer::copy_of({reinterpret_cast<const std::byte*>(reason.data()), reason.size()});
    static_cast<void>(p->send(make_frame(kAbort, options_.rank, 0, std::move(text))));
  }
}

}  // namespace troupe::transport
