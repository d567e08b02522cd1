#include "bench/head_sim.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <random>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "core/actor_type.h"
#include "core/cluster/detail/rpc.capnp.h"
#include "core/detail/remote_codec.h"
#include "transport/message.h"

namespace troupe::bench {

using cluster::ClusterEvent;
using cluster::HeartbeatReply;
using cluster::NodeInfo;
using cluster::NodeKind;
using cluster::Registration;
using transport::Connection;
using transport::Frame;

struct SimFleet::Agent {
  int slot = 0;
  NodeKind kind = NodeKind::kWorker;
  std::unique_ptr<transport::Listener> listener;
  std::shared_ptr<Connection> conn;  // to the head
  // The rest under the fleet's mu_.
  uint32_t node = cluster::kUnassignedNode;
  std::vector<std::weak_ptr<Connection>> accepted;  // the head's connections to it
  uint64_t seen_version = 0;
  absl::Duration interval = absl::Milliseconds(100);
  bool ready = false;
  bool hung = false;
  bool crashed = false;
  bool told_unknown = false;
  bool in_flight = false;  // a heartbeat awaits its reply (the next waits for it, as a Member's)
  std::optional<absl::Time> death_heard;
};

namespace {

// Calls in flight, by call id, across the fleet.
struct CallTable {
  std::mutex mu;
  absl::flat_hash_map<uint64_t, SimFleet::Done> calls;
};
CallTable& call_table() {
  static auto* table = new CallTable();
  return *table;
}

Frame call_frame(uint64_t call_id, uint64_t target, uint64_t method, Writer& args) {
  capnp::MallocMessageBuilder builder(128);
  auto call = builder.initRoot<cluster::schema::Envelope>().initCall();
  call.setCallId(call_id);
  call.setTarget(target);
  call.setMethod(method);
  const std::vector<std::byte>& bytes = args.bytes();
  call.setArgs(
      kj::ArrayPtr<const kj::byte>(reinterpret_cast<const kj::byte*>(bytes.data()), bytes.size()));
  Frame f;
  f.message = transport::to_buffer(builder);
  return f;
}

Frame reply_frame(uint64_t call_id, Writer& result) {
  capnp::MallocMessageBuilder builder(128);
  auto reply = builder.initRoot<cluster::schema::Envelope>().initReply();
  reply.setCallId(call_id);
  const std::vector<std::byte>& bytes = result.bytes();
  reply.setResult(
      kj::ArrayPtr<const kj::byte>(reinterpret_cast<const kj::byte*>(bytes.data()), bytes.size()));
  Frame f;
  f.message = transport::to_buffer(builder);
  return f;
}

std::span<const std::byte> as_span(capnp::Data::Reader data) {
  return {reinterpret_cast<const std::byte*>(data.begin()), data.size()};
}

double ms(absl::Duration d) {
  return absl::ToDoubleMilliseconds(d);
}

}  // namespace

double Latencies::quantile(double q) const {
  if (ms.empty()) return 0;
  std::vector<double> sorted = ms;
  std::sort(sorted.begin(), sorted.end());
  size_t i = static_cast<size_t>(q * static_cast<double>(sorted.size() - 1) + 0.5);
  return sorted[std::min(i, sorted.size() - 1)];
}

SimFleet::SimFleet(SimOptions options) : options_(std::move(options)) {}

absl::StatusOr<std::unique_ptr<SimFleet>> SimFleet::start(SimOptions options) {
  std::unique_ptr<SimFleet> fleet(new SimFleet(std::move(options)));
  transport::TransportOptions topts;
  topts.token = fleet->options_.token;
  topts.local_name = "head_bench agent";
  auto t = transport::make_transport("tcp", topts);
  if (!t.ok()) return t.status();
  fleet->transport_ = *std::move(t);
  fleet->slot_of_node_.assign(cluster::kLastNode + 1, -1);
  fleet->jitter_us_ = absl::ToInt64Microseconds(fleet->options_.jitter);
  fleet->timer_ = std::thread([f = fleet.get()] { f->timer_loop(); });
  return fleet;
}

SimFleet::~SimFleet() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (timer_.joinable()) timer_.join();
  for (auto& a : agents_) {
    if (a->conn) a->conn->abort(absl::CancelledError("the bench is done"));
    if (a->listener) a->listener->close();
  }
  transport_.reset();  // no callback runs after this
}

uint64_t SimFleet::method_id(const std::string& type, const std::string& method) const {
  const ActorTypeInfo* info = find_actor_type(type);
  std::string name = absl::StrCat(type, "::", method);
  if (info != nullptr) {
    for (const MethodInfo& m : info->methods) {
      if (m.name == name) return m.id;
    }
  }
  std::fprintf(stderr, "head_bench: no method %s in this build\n", name.c_str());
  std::abort();
}

absl::Status SimFleet::connect(Agent& agent) {
  int slot = agent.slot;
  transport::ConnectionCallbacks callbacks{[this, slot](Frame& f) {
                                             Agent* a = nullptr;
                                             {
                                               std::lock_guard<std::mutex> lock(mu_);
                                               a = agents_[static_cast<size_t>(slot)].get();
                                             }
                                             on_reply(*a, f);
                                           },
                                           [](absl::Status) {}};
  auto conn = transport_->connect(options_.head, callbacks, absl::Seconds(30));
  if (!conn.ok()) return conn.status();
  agent.conn = *std::move(conn);
  return absl::OkStatus();
}

void SimFleet::send_call(Agent& agent, uint64_t method, Writer& args, Done done) {
  uint64_t id = next_call_.fetch_add(1);
  {
    std::lock_guard<std::mutex> lock(call_table().mu);
    call_table().calls.emplace(id, std::move(done));
  }
  absl::Status sent =
      agent.conn->send(call_frame(id, cluster::head_service_id().value, method, args));
  if (!sent.ok()) {
    Done failed;
    {
      std::lock_guard<std::mutex> lock(call_table().mu);
      auto it = call_table().calls.find(id);
      if (it == call_table().calls.end()) return;
      failed = std::move(it->second);
      call_table().calls.erase(it);
    }
    failed(sent);
  }
}

void SimFleet::on_reply(Agent& agent, Frame& frame) {
  static_cast<void>(agent);
  auto reader = transport::read_message(frame.message);
  auto envelope = reader.getRoot<cluster::schema::Envelope>();
  if (!envelope.isReply()) return;
  auto r = envelope.getReply();
  Done done;
  {
    std::lock_guard<std::mutex> lock(call_table().mu);
    auto it = call_table().calls.find(r.getCallId());
    if (it == call_table().calls.end()) return;
    done = std::move(it->second);
    call_table().calls.erase(it);
  }
  done(as_span(r.getResult()));
}

void SimFleet::call_head(int slot, const std::string& method, Writer& args, Done done) {
  Agent* a = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    a = agents_[static_cast<size_t>(slot)].get();
  }
  send_call(*a, method_id("HeadService", method), args, std::move(done));
}

absl::StatusOr<std::vector<std::byte>> SimFleet::call_head_sync(int slot, const std::string& method,
                                                                Writer& args,
                                                                absl::Duration timeout) {
  struct Wait {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    absl::StatusOr<std::vector<std::byte>> result;
  };
  auto wait = std::make_shared<Wait>();
  call_head(slot, method, args, [wait](absl::StatusOr<std::span<const std::byte>> in) {
    std::lock_guard<std::mutex> lock(wait->mu);
    if (in.ok()) {
      wait->result = std::vector<std::byte>(in->begin(), in->end());
    } else {
      wait->result = in.status();
    }
    wait->done = true;
    wait->cv.notify_all();
  });
  std::unique_lock<std::mutex> lock(wait->mu);
  if (!wait->cv.wait_for(lock, absl::ToChronoSeconds(timeout), [&] { return wait->done; })) {
    return absl::DeadlineExceededError(absl::StrCat(method, ": no reply"));
  }
  return wait->result;
}

// --- Joining ---------------------------------------------------------------------

void SimFleet::register_agent(int slot, std::function<void(absl::Status)> ready) {
  Agent* a = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    a = agents_[static_cast<size_t>(slot)].get();
  }
  NodeInfo info;
  info.kind = a->kind;
  info.name = absl::StrCat("sim ", a->kind == NodeKind::kDriver ? "driver " : "", slot);
  info.host = "127.0.0.1";
  info.pid = ::getpid();
  if (a->listener) info.endpoints = {a->listener->address()};
  if (a->kind == NodeKind::kWorker) info.resources = options_.resources;
  Writer args;
  args.write(info);
  absl::Time sent = absl::Now();
  send_call(*a, method_id("HeadService", "register_node"), args,
            [this, slot, a, sent, ready](absl::StatusOr<std::span<const std::byte>> in) {
              absl::StatusOr<Registration> r =
                  in.ok() ? decode<Registration>(*in) : absl::StatusOr<Registration>(in.status());
              if (!r.ok()) {
                ready(r.status());
                return;
              }
              absl::Time now = absl::Now();
              {
                std::lock_guard<std::mutex> lock(mu_);
                register_rtt_.ms.push_back(ms(now - sent));
                a->node = r->index;
                a->interval = absl::Milliseconds(r->heartbeat_ms);
                for (const ClusterEvent& e : r->events)
                  a->seen_version = std::max(a->seen_version, e.version);
                slot_of_node_[r->index] = slot;
              }
              auto start_heartbeats = [this, a, ready](absl::Status s) {
                if (s.ok()) {
                  std::lock_guard<std::mutex> lock(mu_);
                  a->ready = true;
                  // Its own phase, as a process started at a random moment.
                  static thread_local std::mt19937_64 rng(std::random_device{}());
                  int64_t phase_us = absl::ToInt64Microseconds(a->interval);
                  due_.emplace(absl::Now() + absl::Microseconds(static_cast<int64_t>(
                                                 rng() % static_cast<uint64_t>(phase_us + 1))),
                               a->slot);
                  cv_.notify_all();
                }
                ready(s);
              };
              if (a->kind != NodeKind::kWorker) {
                start_heartbeats(absl::OkStatus());
                return;
              }
              Writer ready_args;
              ready_args.write(r->index);
              absl::Time asked = absl::Now();
              send_call(
                  *a, method_id("HeadService", "node_ready"), ready_args,
                  [this, asked, start_heartbeats](absl::StatusOr<std::span<const std::byte>> done) {
                    absl::Status s = done.ok() ? decode<void>(*done) : done.status();
                    {
                      std::lock_guard<std::mutex> lock(mu_);
                      register_rtt_.ms.push_back(ms(absl::Now() - asked));
                    }
                    start_heartbeats(s);
                  });
            });
}

absl::Status SimFleet::add_workers(int n, absl::Duration spread, absl::Duration timeout) {
  int first = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    first = static_cast<int>(agents_.size());
  }
  // Listeners first (a node listens before it registers).
  for (int i = 0; i < n; ++i) {
    auto agent = std::make_unique<Agent>();
    agent->slot = first + i;
    int slot = agent->slot;
    auto listener =
        transport_->listen("tcp://127.0.0.1:0", [this, slot](std::shared_ptr<Connection> conn) {
          std::weak_ptr<Connection> weak = conn;
          {
            std::lock_guard<std::mutex> lock(mu_);
            agents_[static_cast<size_t>(slot)]->accepted.push_back(weak);
          }
          return transport::ConnectionCallbacks{
              [this, slot, weak](Frame& f) { on_head_call(slot, weak, f); }, [](absl::Status) {}};
        });
    if (!listener.ok()) return listener.status();
    agent->listener = *std::move(listener);
    std::lock_guard<std::mutex> lock(mu_);
    agents_.push_back(std::move(agent));
  }
  struct Progress {
    std::mutex mu;
    std::condition_variable cv;
    int ready = 0;
    absl::Status error;
  };
  auto progress = std::make_shared<Progress>();
  auto finished = [progress](absl::Status s) {
    std::lock_guard<std::mutex> lock(progress->mu);
    ++progress->ready;
    if (!s.ok() && progress->error.ok()) progress->error = s;
    progress->cv.notify_all();
  };
  // Connecting blocks for a handshake: a few threads start the agents on schedule.
  constexpr int kStarters = 4;
  absl::Time start = absl::Now();
  std::vector<std::thread> starters;
  for (int t = 0; t < kStarters; ++t) {
    starters.emplace_back([&, t] {
      for (int i = t; i < n; i += kStarters) {
        absl::Time at = start + spread * i / std::max(n, 1);
        if (absl::Now() < at) absl::SleepFor(at - absl::Now());
        Agent* a = nullptr;
        {
          std::lock_guard<std::mutex> lock(mu_);
          a = agents_[static_cast<size_t>(first + i)].get();
        }
        if (absl::Status s = connect(*a); !s.ok()) {
          finished(s);
          continue;
        }
        register_agent(first + i, finished);
      }
    });
  }
  for (std::thread& t : starters)
    t.join();
  std::unique_lock<std::mutex> lock(progress->mu);
  bool all = progress->cv.wait_for(lock, absl::ToChronoSeconds(timeout),
                                   [&] { return progress->ready == n; });
  if (!progress->error.ok()) return progress->error;
  if (!all) {
    return absl::DeadlineExceededError(absl::StrCat(
        progress->ready, " of ", n, " agents ready after ", absl::FormatDuration(timeout)));
  }
  return absl::OkStatus();
}

absl::StatusOr<int> SimFleet::add_driver(absl::Duration timeout) {
  int slot = 0;
  Agent* a = nullptr;
  {
    auto agent = std::make_unique<Agent>();
    agent->kind = NodeKind::kDriver;
    std::lock_guard<std::mutex> lock(mu_);
    slot = agent->slot = static_cast<int>(agents_.size());
    a = agent.get();
    agents_.push_back(std::move(agent));
  }
  if (absl::Status s = connect(*a); !s.ok()) return s;
  struct Wait {
    std::mutex mu;
    std::condition_variable cv;
    std::optional<absl::Status> status;
  };
  auto wait = std::make_shared<Wait>();
  register_agent(slot, [wait](absl::Status s) {
    std::lock_guard<std::mutex> lock(wait->mu);
    wait->status = s;
    wait->cv.notify_all();
  });
  std::unique_lock<std::mutex> lock(wait->mu);
  if (!wait->cv.wait_for(lock, absl::ToChronoSeconds(timeout),
                         [&] { return wait->status.has_value(); })) {
    return absl::DeadlineExceededError("the driver agent did not register");
  }
  if (!wait->status->ok()) return *wait->status;
  return slot;
}

absl::Status SimFleet::leave(int driver, absl::Duration timeout) {
  Writer args;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Agent& a = *agents_[static_cast<size_t>(driver)];
    a.crashed = true;  // no more heartbeats
    args.write(a.node);
  }
  args.write(std::string("the bench is done with it"));
  return call_head_sync(driver, "unregister_node", args, timeout).status();
}

// --- Heartbeats ------------------------------------------------------------------

void SimFleet::timer_loop() {
  std::mt19937_64 rng(42);
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    absl::Time now = absl::Now();
    if (due_.empty() || due_.begin()->first > now) {
      absl::Duration wait = due_.empty()
                                ? absl::Milliseconds(5)
                                : std::min(due_.begin()->first - now, absl::Milliseconds(5));
      cv_.wait_for(
          lock, std::chrono::microseconds(std::max<int64_t>(1, absl::ToInt64Microseconds(wait))));
      continue;
    }
    auto it = due_.begin();
    absl::Time due = it->first;
    int slot = it->second;
    due_.erase(it);
    Agent& a = *agents_[static_cast<size_t>(slot)];
    if (a.crashed || a.told_unknown) continue;
    absl::Duration jitter = jitter_us_ > 0 ? absl::Microseconds(static_cast<int64_t>(
                                                 rng() % static_cast<uint64_t>(jitter_us_ + 1)))
                                           : absl::ZeroDuration();
    due_.emplace(due + a.interval + jitter, slot);
    if (a.hung || a.in_flight) continue;
    a.in_flight = true;
    lag_.ms.push_back(ms(now - due));
    uint32_t node = a.node;
    uint64_t seen = a.seen_version;
    lock.unlock();
    Writer args;
    args.write(node);
    args.write(seen);
    heartbeats_sent_.fetch_add(1);
    static const uint64_t kHeartbeat = method_id("HeadService", "heartbeat");
    absl::Time sent = absl::Now();
    send_call(
        a, kHeartbeat, args, [this, slot, sent](absl::StatusOr<std::span<const std::byte>> in) {
          absl::StatusOr<HeartbeatReply> r =
              in.ok() ? decode<HeartbeatReply>(*in) : absl::StatusOr<HeartbeatReply>(in.status());
          if (!r.ok()) {
            std::lock_guard<std::mutex> guard(mu_);
            agents_[static_cast<size_t>(slot)]->in_flight = false;
            return;
          }
          on_heartbeat(slot, sent, *std::move(r));
        });
    lock.lock();
  }
}

void SimFleet::on_heartbeat(int slot, absl::Time sent, HeartbeatReply reply) {
  absl::Time now = absl::Now();
  heartbeats_answered_.fetch_add(1);
  std::lock_guard<std::mutex> lock(mu_);
  Agent& a = *agents_[static_cast<size_t>(slot)];
  a.in_flight = false;
  heartbeat_rtt_.ms.push_back(ms(now - sent));
  if (!reply.known) {
    a.told_unknown = true;
    return;
  }
  a.seen_version = std::max(a.seen_version, reply.version);
  if (reply.heartbeat_ms > 0) a.interval = absl::Milliseconds(reply.heartbeat_ms);
  for (const ClusterEvent& e : reply.events) {
    if (e.kind != ClusterEvent::kNodeDied) continue;
    int dead = slot_of_node_[e.node.index];
    if (dead < 0) continue;
    Agent& d = *agents_[static_cast<size_t>(dead)];
    if (!d.death_heard) d.death_heard = now;
  }
}

// --- The head's calls --------------------------------------------------------------

void SimFleet::on_head_call(int slot, const std::weak_ptr<Connection>& conn, Frame& frame) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    const Agent& a = *agents_[static_cast<size_t>(slot)];
    if (a.hung || a.crashed) return;  // it answers nothing
  }
  static const uint64_t kHost = method_id("NodeAgent", "host");
  static const uint64_t kKill = method_id("NodeAgent", "kill");
  auto reader = transport::read_message(frame.message);
  auto envelope = reader.getRoot<cluster::schema::Envelope>();
  if (!envelope.isCall()) return;
  auto call = envelope.getCall();
  uint64_t method = call.getMethod();
  if (method == kKill) {
    killed_.fetch_add(1);
    return;
  }
  if (method != kHost || call.getCallId() == 0) return;
  std::span<transport::Buffer> buffers(frame.buffers.data(), frame.buffers.size());
  Reader args(as_span(call.getArgs()), buffers);
  cluster::HostRequest request;
  Writer result;
  if (args.read(request)) {
    hosted_.fetch_add(1);
    result.write(absl::OkStatus());
    result.write(request.id);
  } else {
    result.write(args.status());
  }
  if (auto c = conn.lock()) static_cast<void>(c->send(reply_frame(call.getCallId(), result)));
}

// --- Faults and observations --------------------------------------------------------

void SimFleet::crash(int slot) {
  std::vector<std::shared_ptr<Connection>> conns;
  Agent* a = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    a = agents_[static_cast<size_t>(slot)].get();
    a->crashed = true;
    for (auto& w : a->accepted) {
      if (auto c = w.lock()) conns.push_back(c);
    }
  }
  if (a->listener) a->listener->close();
  for (auto& c : conns)
    c->abort(absl::UnavailableError("crashed"));
  if (a->conn) a->conn->abort(absl::UnavailableError("crashed"));
}

void SimFleet::hang(int slot) {
  std::lock_guard<std::mutex> lock(mu_);
  agents_[static_cast<size_t>(slot)]->hung = true;
}

void SimFleet::heal(int slot) {
  std::lock_guard<std::mutex> lock(mu_);
  Agent& a = *agents_[static_cast<size_t>(slot)];
  a.hung = false;
  a.in_flight = false;  // the reply to the one sent before it hung may never come
}

void SimFleet::set_jitter(absl::Duration jitter) {
  std::lock_guard<std::mutex> lock(mu_);
  jitter_us_ = absl::ToInt64Microseconds(jitter);
}

int SimFleet::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(agents_.size());
}

uint32_t SimFleet::node_of(int slot) const {
  std::lock_guard<std::mutex> lock(mu_);
  return agents_[static_cast<size_t>(slot)]->node;
}

std::optional<absl::Time> SimFleet::death_heard(int slot) const {
  std::lock_guard<std::mutex> lock(mu_);
  return agents_[static_cast<size_t>(slot)]->death_heard;
}

std::vector<int> SimFleet::heard_dead() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<int> out;
  for (const auto& a : agents_) {
    if (a->death_heard) out.push_back(a->slot);
  }
  return out;
}

bool SimFleet::told_unknown(int slot) const {
  std::lock_guard<std::mutex> lock(mu_);
  return agents_[static_cast<size_t>(slot)]->told_unknown;
}

Latencies SimFleet::lag() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lag_;
}

Latencies SimFleet::heartbeat_rtt() const {
  std::lock_guard<std::mutex> lock(mu_);
  return heartbeat_rtt_;
}

Latencies SimFleet::register_rtt() const {
  std::lock_guard<std::mutex> lock(mu_);
  return register_rtt_;
}

void SimFleet::reset_counters() {
  std::lock_guard<std::mutex> lock(mu_);
  lag_.ms.clear();
  heartbeat_rtt_.ms.clear();
  register_rtt_.ms.clear();
  heartbeats_sent_.store(0);
  heartbeats_answered_.store(0);
}

}  // namespace troupe::bench
