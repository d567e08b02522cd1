#include "core/cluster/detail/node.h"

#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "core/cluster/detail/remote_actor.h"
#include "core/cluster/detail/reply_driver.h"
#include "core/cluster/detail/rpc.capnp.h"
#include "core/cluster/protocol.h"
#include "core/codec.h"
#include "spdlog/spdlog.h"
#include "transport/endpoints.h"
#include "transport/message.h"

namespace troupe::cluster {

using transport::Connection;
using transport::ConnectionCallbacks;
using transport::Frame;

// The node's shared state: transports, connections to other nodes and the
// calls in flight on them. Remote handles hold it, so it outlives the Node
// object; after shutdown() every send fails.
class NodeCore : public std::enable_shared_from_this<NodeCore>, public detail::ActorResolver {
 public:
  NodeCore(NodeOptions options, ActorSystem* system)
      : options_(std::move(options)), system_(system) {}

  absl::Status start_listening();
  void shutdown();

  uint32_t index() const { return index_.load(std::memory_order_acquire); }
  void set_index(uint32_t index) { index_.store(index, std::memory_order_release); }
  const std::vector<std::string>& endpoints() const { return endpoints_; }
  // An open connection to a node, and what a caller waiting for a reply on
  // it may drive (null where the connection offers nothing to drive).
  struct Link {
    std::shared_ptr<Connection> conn;
    std::shared_ptr<ReplyDriver> driver;
  };
  // The connection to `node`, opened now if there is none.
  absl::StatusOr<Link> connection_to(uint32_t node);
  uint64_t calls_served() const { return calls_served_.load(std::memory_order_relaxed); }

  void set_hooks(NodeHooks hooks) {
    std::lock_guard<std::mutex> lock(mu_);
    hooks_ = std::move(hooks);
  }
  NodeHooks hooks() {
    std::lock_guard<std::mutex> lock(mu_);
    return hooks_;
  }

  void set_node_endpoints(uint32_t node, std::vector<std::string> endpoints);
  void redirect(uint32_t node, std::vector<std::string> endpoints);
  void fail_node(uint32_t node, const absl::Status& reason);
  void relocate(ActorId id, uint32_t node) {
    std::lock_guard<std::mutex> lock(mu_);
    moved_[id] = node;
  }

  // Sends user message `m` to actor `id` (of `type`, if known), last seen
  // on node `hint`; `attempt` counts the times it was sent before (its
  // earlier sends were lost with their node).
  void send(uint32_t hint, ActorId id, detail::Message* m, const ActorTypeInfo* type = nullptr,
            int attempt = 0);

  // detail::ActorResolver: how ActorRefs in calls are written and read here.
  uint32_t location_of(const detail::ActorHandle& handle) const override;
  detail::IntrusivePtr<detail::ActorHandle> resolve(ActorId id, const ActorTypeInfo& type,
                                                    uint32_t node) override;

 private:
  struct Peer {
    // One connection attempt at a time; held while connecting (seconds, to
    // a node that does not answer), so nothing else waits on it.
    std::mutex connect_mu;
    std::mutex mu;  // guards the fields below; never held while connecting
    Link link;      // empty until connected
    std::vector<std::string> endpoints;
    absl::Status lost;  // set once the node is declared gone
    // Bumped when the node moves (redirect): the loss of a connection to
    // where it was is no longer news.
    uint64_t generation = 0;
  };
  struct Pending {
    detail::Message* message;
    uint32_t node;
    ActorId target;
    const ActorTypeInfo* type;  // null if unknown
    int attempt;
  };

  // The node to send to now: the actor's new home if it moved, else `hint`.
  uint32_t route(uint32_t hint, ActorId id) const;
  // Whether `node` was declared gone.
  bool lost(uint32_t node) {
    std::shared_ptr<Peer> p = peer(node);
    std::lock_guard<std::mutex> lock(p->mu);
    return !p->lost.ok();
  }
  std::shared_ptr<Peer> peer(uint32_t node);
  void send_local(ActorId id, detail::Message* m);
  void on_reply(Frame& frame);
  void on_connection_lost(uint32_t node, const std::shared_ptr<Peer>& p, uint64_t generation,
                          absl::Status why);
  ConnectionCallbacks accept(const std::shared_ptr<Connection>& conn);
  void on_call(const std::weak_ptr<Connection>& conn, Frame& frame);
  // Fails the calls in flight to `node` with `why`, but for those that may
  // be sent again (retry_lost).
  void fail_pending(uint32_t node, const absl::Status& why);
  // Whether lost call `call` is of an idempotent method of an actor that
  // can move (its retries are its max_task_retries).
  static bool may_retry(const Pending& call);
  // Sends lost call `call` again once its actor runs elsewhere, if its
  // max_task_retries allow; else fails it. On a thread of its own: it waits
  // for the head to restart the actor. Needs the task_retries and locate hooks.
  void retry_lost(Pending call, absl::Status why);

  const NodeOptions options_;
  ActorSystem* const system_;
  std::atomic<uint32_t> index_{options_.index};
  std::map<std::string, std::unique_ptr<transport::Transport>, std::less<>> transports_;
  std::vector<std::unique_ptr<transport::Listener>> listeners_;
  std::vector<std::string> endpoints_;
  std::atomic<uint64_t> next_call_{1};
  std::atomic<uint64_t> calls_served_{0};

  mutable std::mutex mu_;  // guards the fields below
  bool shut_down_ = false;
  NodeHooks hooks_;
  absl::flat_hash_map<uint32_t, std::shared_ptr<Peer>> peers_;
  absl::flat_hash_map<uint64_t, Pending> pending_;
  absl::flat_hash_map<ActorId, uint32_t> moved_;
};

namespace {

// A Data frame carrying `builder`'s envelope and `buffers`.
Frame envelope_frame(capnp::MessageBuilder& builder, std::vector<transport::Buffer> buffers) {
  Frame f;
  f.message = transport::to_buffer(builder);
  for (transport::Buffer& b : buffers)
    f.buffers.push_back(std::move(b));
  return f;
}

kj::ArrayPtr<const kj::byte> as_kj(const std::vector<std::byte>& bytes) {
  return {reinterpret_cast<const kj::byte*>(bytes.data()), bytes.size()};
}

std::span<const std::byte> as_span(capnp::Data::Reader data) {
  return {reinterpret_cast<const std::byte*>(data.begin()), data.size()};
}

// A lost call waits this long, at most, for the head to learn of the loss.
constexpr int kRelocateChecks = 100;
constexpr absl::Duration kRelocateCheckInterval = absl::Milliseconds(50);

absl::Status node_lost_error(ActorId id, uint32_t node, const absl::Status& why) {
  return ActorDiedError(absl::StrCat(to_string(id), " was on node ", node,
                                     ", which was lost: ", std::string(why.message())));
}

}  // namespace

absl::Status NodeCore::start_listening() {
  transport::TransportOptions topts;
  topts.token = options_.token;
  topts.local_name = options_.name;
  topts.host = options_.host;
  for (const std::string& kind : options_.transports) {
    auto t = transport::make_transport(kind, topts);
    if (!t.ok()) {
      spdlog::info("node {}: transport {} is not available here: {}", index(), kind,
                   std::string(t.status().message()));
      continue;
    }
    std::weak_ptr<NodeCore> weak = weak_from_this();
    uint16_t port = kind == "tcp" ? options_.tcp_port : 0;
    auto listener = (*t)->listen(absl::StrCat(kind, "://", options_.host, ":", port),
                                 [weak](std::shared_ptr<Connection> conn) {
                                   auto self = weak.lock();
                                   return self ? self->accept(conn) : ConnectionCallbacks{};
                                 });
    if (!listener.ok()) return listener.status();
    endpoints_.push_back((*listener)->address());
    listeners_.push_back(*std::move(listener));
    transports_.emplace(kind, *std::move(t));
  }
  if (transports_.empty()) {
    return absl::UnavailableError("no data-plane transport could start on this node");
  }
  return absl::OkStatus();
}

void NodeCore::shutdown() {
  absl::flat_hash_map<uint32_t, std::shared_ptr<Peer>> peers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shut_down_) return;
    shut_down_ = true;
    peers.swap(peers_);
  }
  for (auto& l : listeners_)
    l->close();
  for (auto& [node, p] : peers) {
    std::lock_guard<std::mutex> lock(p->mu);
    if (p->link.conn) p->link.conn->close();
  }
  std::vector<Pending> pending;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [id, call] : pending_)
      pending.push_back(call);
    pending_.clear();
  }
  for (Pending& call : pending)
    call.message->reject(absl::UnavailableError("this node is shutting down"));
  transports_.clear();  // joins the I/O threads: no callback runs after this
}

std::shared_ptr<NodeCore::Peer> NodeCore::peer(uint32_t node) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& p = peers_[node];
  if (!p) p = std::make_shared<Peer>();
  return p;
}

void NodeCore::set_node_endpoints(uint32_t node, std::vector<std::string> endpoints) {
  std::shared_ptr<Peer> p = peer(node);
  std::lock_guard<std::mutex> lock(p->mu);
  p->endpoints = std::move(endpoints);
  p->lost = absl::OkStatus();  // a node index is never reused, but a re-announced one is alive
}

void NodeCore::redirect(uint32_t node, std::vector<std::string> endpoints) {
  std::shared_ptr<Peer> p = peer(node);
  std::shared_ptr<Connection> conn;
  {
    std::lock_guard<std::mutex> lock(p->mu);
    p->endpoints = std::move(endpoints);
    p->lost = absl::OkStatus();
    ++p->generation;
    conn = std::exchange(p->link, {}).conn;
  }
  fail_pending(node, absl::UnavailableError(absl::StrCat("node ", node, " moved")));
  if (conn) conn->close();
}

void NodeCore::fail_node(uint32_t node, const absl::Status& reason) {
  std::shared_ptr<Peer> p = peer(node);
  std::shared_ptr<Connection> conn;
  absl::Status lost;
  {
    // Not connect_mu: a connection attempt may be under way.
    std::lock_guard<std::mutex> lock(p->mu);
    p->lost = reason.ok() ? absl::UnavailableError("declared dead") : reason;
    lost = p->lost;
    conn = std::exchange(p->link, {}).conn;
  }
  fail_pending(node, lost);  // before closing: the close reports a vaguer reason
  if (conn) conn->close();
}

void NodeCore::fail_pending(uint32_t node, const absl::Status& why) {
  std::vector<Pending> failed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (it->second.node == node) {
        failed.push_back(it->second);
        pending_.erase(it++);
      } else {
        ++it;
      }
    }
  }
  if (failed.empty()) return;
  NodeHooks h = hooks();
  const bool can_retry = h.task_retries && h.locate;
  for (Pending& call : failed) {
    if (can_retry && may_retry(call)) {
      retry_lost(call, why);
    } else {
      call.message->reject(node_lost_error(call.target, node, why));
    }
  }
}

bool NodeCore::may_retry(const Pending& call) {
  if (call.type == nullptr || !is_cluster_actor(call.target)) return false;
  const MethodInfo* method = call.type->method(call.message->method_id());
  return method != nullptr && method->idempotent && call.message->wants_reply();
}

void NodeCore::retry_lost(Pending call, absl::Status why) {
  std::thread([self = shared_from_this(), call, why] {
    NodeHooks h = self->hooks();
    absl::StatusOr<int> allowed = h.task_retries(call.target);
    if (!allowed.ok() || (*allowed >= 0 && call.attempt >= *allowed)) {
      call.message->reject(node_lost_error(call.target, call.node, why));
      return;
    }
    // The head may not have heard of the loss yet: until it has, it still
    // places the actor on the lost node.
    for (int i = 0; i < kRelocateChecks; ++i) {
      absl::StatusOr<uint32_t> where = h.locate(call.target);
      if (where.ok() && *where != call.node) {
        self->relocate(call.target, *where);
        self->send(*where, call.target, call.message, call.type, call.attempt + 1);
        return;
      }
      if (!where.ok()) {
        call.message->reject(IsActorDied(where.status())
                                 ? where.status()
                                 : node_lost_error(call.target, call.node, why));
        return;
      }
      absl::SleepFor(kRelocateCheckInterval);
    }
    call.message->reject(node_lost_error(call.target, call.node, why));
  }).detach();
}

uint32_t NodeCore::route(uint32_t hint, ActorId id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = moved_.find(id);
  return it == moved_.end() ? hint : it->second;
}

absl::StatusOr<NodeCore::Link> NodeCore::connection_to(uint32_t node) {
  std::shared_ptr<Peer> p = peer(node);
  auto usable_now = [&]() -> std::optional<absl::StatusOr<Link>> {
    std::lock_guard<std::mutex> lock(p->mu);
    if (!p->lost.ok()) return p->lost;
    if (p->link.conn) return p->link;
    return std::nullopt;
  };
  if (auto now = usable_now()) return *std::move(now);
  std::lock_guard<std::mutex> attempt(p->connect_mu);
  if (auto now = usable_now()) return *std::move(now);  // another thread connected meanwhile
  std::vector<std::string> endpoints;
  uint64_t generation = 0;
  {
    std::lock_guard<std::mutex> lock(p->mu);
    endpoints = p->endpoints;
    generation = p->generation;
  }
  if (endpoints.empty()) {
    // A node that joined after our last heartbeat: ask the head.
    if (auto find = hooks().node_endpoints) {
      absl::StatusOr<std::vector<std::string>> found = find(node);
      if (found.ok()) endpoints = *std::move(found);
    }
    if (endpoints.empty()) {
      return absl::UnavailableError(absl::StrCat("no endpoints known for node ", node));
    }
    std::lock_guard<std::mutex> lock(p->mu);
    if (p->endpoints.empty()) p->endpoints = endpoints;
  }
  std::map<std::string, transport::Transport*, std::less<>> usable;
  for (auto& [kind, t] : transports_)
    usable.emplace(kind, t.get());
  std::weak_ptr<NodeCore> weak = weak_from_this();
  std::weak_ptr<Peer> weak_peer = p;
  ConnectionCallbacks callbacks{[weak](Frame& f) {
                                  if (auto self = weak.lock()) self->on_reply(f);
                                },
                                [weak, weak_peer, node, generation](absl::Status why) {
                                  auto self = weak.lock();
                                  auto peer = weak_peer.lock();
                                  if (self && peer) {
                                    self->on_connection_lost(node, peer, generation, why);
                                  }
                                }};
  auto conn = transport::connect_best(usable, endpoints, callbacks, options_.connect_timeout);
  if (!conn.ok()) return conn.status();
  // Callers waiting for replies run the transport themselves where it lets
  // them (a call crosses fewer threads); replies are the connection's only
  // frames, and on_reply and on_connection_lost do not block.
  std::shared_ptr<ReplyDriver> driver = ReplyDriver::of(*conn);
  absl::Status lost;
  {
    std::lock_guard<std::mutex> lock(p->mu);
    if (p->lost.ok() && p->generation == generation) {
      p->link = Link{*conn, std::move(driver)};
      return p->link;
    }
    lost = p->lost.ok() ? absl::UnavailableError(absl::StrCat("node ", node, " moved")) : p->lost;
  }
  (*conn)->close();  // declared gone while we connected
  return lost;
}

void NodeCore::on_connection_lost(uint32_t node, const std::shared_ptr<Peer>& p,
                                  uint64_t generation, absl::Status why) {
  {
    std::lock_guard<std::mutex> lock(p->mu);
    if (p->generation != generation) return;  // a connection to where it was before it moved
    p->link = {};                      // the next call reconnects, if the node is still alive
    if (!p->lost.ok()) why = p->lost;  // declared gone: that is the reason
  }
  if (why.ok()) why = absl::UnavailableError("the peer closed the connection");
  // The head hears of the loss before the callers do: a caller that asks
  // the head about the lost node once its call failed (recovery does) finds
  // it dead, not still alive - the report is sent ahead on the same
  // connection.
  bool shutting_down;
  {
    std::lock_guard<std::mutex> lock(mu_);
    shutting_down = shut_down_;
  }
  if (!shutting_down) {
    if (auto lost = hooks().peer_lost) lost(node, why);
  }
  fail_pending(node, why);
}

void NodeCore::send(uint32_t hint, ActorId id, detail::Message* m, const ActorTypeInfo* type,
                    int attempt) {
  uint32_t node = route(hint, id);
  if (node == index()) {
    send_local(id, m);
    return;
  }
  auto link = connection_to(node);
  if (!link.ok()) {
    bool gone = lost(node);
    NodeHooks h = hooks();
    if (!gone && absl::IsUnavailable(link.status()) && h.peer_lost) {
      h.peer_lost(node, link.status());  // the head may declare the node dead at once
    }
    // Ask the head where the actor is now: restarted elsewhere, or dead.
    // Only cluster actors move; the head's own service never does, so a
    // call to an unreachable head is not located through the head (which
    // would send to it again).
    if (h.locate && is_cluster_actor(id)) {
      absl::StatusOr<uint32_t> now = h.locate(id);
      if (now.ok() && *now != node) {
        relocate(id, *now);
        send(*now, id, m, type, attempt);
        return;
      }
      if (!now.ok() && IsActorDied(now.status())) {
        m->reject(now.status());
        return;
      }
    }
    if (gone) {
      m->reject(node_lost_error(id, node, link.status()));
    } else {
      m->reject(absl::Status(link.status().code(),
                             absl::StrCat("cannot reach node ", node, " (for ", to_string(id),
                                          "): ", link.status().message())));
    }
    return;
  }
  Writer args;
  args.set_actor_resolver(this);
  if (absl::Status s = m->encode_args(args); !s.ok()) {
    m->reject(s);
    return;
  }
  bool reply = m->wants_reply();
  uint64_t call_id = reply ? next_call_.fetch_add(1, std::memory_order_relaxed) : 0;
  capnp::MallocMessageBuilder builder(128);
  auto call = builder.initRoot<schema::Envelope>().initCall();
  call.setCallId(call_id);
  call.setTarget(id.value);
  call.setMethod(m->method_id());
  call.setArgs(as_kj(args.bytes()));
  Frame frame = envelope_frame(builder, std::move(args.buffers()));
  if (reply) {
    std::lock_guard<std::mutex> lock(mu_);
    if (shut_down_) {
      m->reject(absl::UnavailableError("this node is shutting down"));
      return;
    }
    pending_.emplace(call_id, Pending{m, node, id, type, attempt});
  }
  // Set before the send, while this node holds the message: the reply may
  // complete it (and the caller drop it) at once.
  if (reply && link->driver) {
    if (detail::FutureStateBase* state = m->reply_state()) state->drive_with(link->driver);
  }
  absl::Status sent = link->conn->send(std::move(frame));
  if (!reply) {
    m->reject(absl::OkStatus());  // a tell is done once sent; reject() disposes of it
    return;
  }
  if (!sent.ok()) {
    detail::Message* failed = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = pending_.find(call_id);
      if (it != pending_.end()) {
        failed = it->second.message;
        pending_.erase(it);
      }
    }
    if (failed != nullptr) failed->reject(node_lost_error(id, node, sent));
  }
}

uint32_t NodeCore::location_of(const detail::ActorHandle& handle) const {
  if (const auto* remote = dynamic_cast<const RemoteActor*>(&handle)) {
    return route(remote->location(), remote->id());
  }
  return index();
}

detail::IntrusivePtr<detail::ActorHandle> NodeCore::resolve(ActorId id, const ActorTypeInfo& type,
                                                            uint32_t node) {
  if (node == index()) {
    if (auto local = system_->find(id)) return local;
  }
  return detail::IntrusivePtr<detail::ActorHandle>::adopt(
      new RemoteActor(shared_from_this(), id, type, node));
}

void NodeCore::send_local(ActorId id, detail::Message* m) {
  auto target = system_->find(id);
  if (!target) {
    m->reject(ActorDiedError(absl::StrCat(to_string(id), " is not alive on node ", index())));
    return;
  }
  target->send(m);
}

void NodeCore::on_reply(Frame& frame) {
  try {
    auto reader = transport::read_message(frame.message);
    auto envelope = reader.getRoot<schema::Envelope>();
    if (!envelope.isReply()) {
      spdlog::warn("node {}: dropped a frame that is not a reply on a calling connection", index());
      return;
    }
    auto r = envelope.getReply();
    detail::Message* m = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = pending_.find(r.getCallId());
      if (it == pending_.end()) return;  // already failed (node lost) or unknown
      m = it->second.message;
      pending_.erase(it);
    }
    std::span<transport::Buffer> buffers(frame.buffers.data(), frame.buffers.size());
    Reader in(as_span(r.getResult()), buffers);
    in.set_actor_resolver(this);
    m->complete_remote(in);
  } catch (const kj::Exception& e) {
    spdlog::warn("node {}: dropped a malformed reply: {}", index(), e.getDescription().cStr());
  }
}

ConnectionCallbacks NodeCore::accept(const std::shared_ptr<Connection>& conn) {
  std::weak_ptr<NodeCore> weak = weak_from_this();
  std::weak_ptr<Connection> weak_conn = conn;
  return ConnectionCallbacks{[weak, weak_conn](Frame& f) {
                               if (auto self = weak.lock()) self->on_call(weak_conn, f);
                             },
                             [](absl::Status) {}};
}

void NodeCore::on_call(const std::weak_ptr<Connection>& conn, Frame& frame) {
  uint64_t call_id = 0;
  // Sends the encoded result of call `call_id` back over `conn`.
  auto make_reply = [conn](uint64_t id) -> RemoteReply {
    return [conn, id](Writer& result) {
      auto c = conn.lock();
      if (!c) return;
      capnp::MallocMessageBuilder builder(128);
      auto reply = builder.initRoot<schema::Envelope>().initReply();
      reply.setCallId(id);
      reply.setResult(as_kj(result.bytes()));
      static_cast<void>(c->send(envelope_frame(builder, std::move(result.buffers()))));
    };
  };
  auto fail = [&](const absl::Status& why) {
    if (call_id == 0) {
      spdlog::debug("node {}: dropped a tell: {}", index(), std::string(why.message()));
      return;
    }
    Writer out;
    out.write(why);
    make_reply(call_id)(out);
  };
  try {
    auto reader = transport::read_message(frame.message);
    auto envelope = reader.getRoot<schema::Envelope>();
    if (!envelope.isCall()) {
      spdlog::warn("node {}: dropped a frame that is not a call", index());
      return;
    }
    auto call = envelope.getCall();
    call_id = call.getCallId();
    ActorId id{call.getTarget()};
    auto target = system_->find(id);
    if (!target) {
      fail(ActorDiedError(absl::StrCat(to_string(id), " is not alive on node ", index())));
      return;
    }
    const MethodInfo* method = target->type().method(call.getMethod());
    if (method == nullptr || !method->invoke) {
      fail(absl::InvalidArgumentError(absl::StrCat(target->type().name, " has no method with id ",
                                                   call.getMethod(), " (mismatched builds?)")));
      return;
    }
    std::span<transport::Buffer> buffers(frame.buffers.data(), frame.buffers.size());
    Reader args(as_span(call.getArgs()), buffers);
    args.set_actor_resolver(this);
    calls_served_.fetch_add(1, std::memory_order_relaxed);
    absl::Status s =
        method->invoke(*target, args, call_id == 0 ? RemoteReply() : make_reply(call_id));
    if (!s.ok()) fail(s);
  } catch (const kj::Exception& e) {
    spdlog::warn("node {}: dropped a malformed call: {}", index(), e.getDescription().cStr());
  }
}

// --- RemoteActor --------------------------------------------------------------

void RemoteActor::send(detail::Message* m) {
  node_->send(location(), id_, m, &type_);
}

void RemoteActor::post_internal(detail::Message* m) {
  m->reject(absl::InternalError("continuations cannot run on an actor in another process"));
}

void RemoteActor::kill(bool restart, std::string reason) {
  if (auto kill = node_->hooks().kill) kill(id_, restart, std::move(reason));
}

void RemoteActor::monitor(DeathCallback cb) {
  if (auto monitor = node_->hooks().monitor) {
    monitor(id_, std::move(cb));
    return;
  }
  cb(id_, absl::UnimplementedError("monitoring an actor in another process needs a cluster"));
}

// --- Node ----------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<Node>> Node::start(NodeOptions options) {
  std::unique_ptr<Node> node(new Node());
  node->system_ = std::make_unique<ActorSystem>(
      ActorSystemOptions{.threads = options.threads, .node = options.index, .spin = options.spin});
  node->core_ = std::make_shared<NodeCore>(std::move(options), node->system_.get());
  if (absl::Status s = node->core_->start_listening(); !s.ok()) return s;
  return node;
}

Node::~Node() {
  if (core_) core_->shutdown();
  if (system_) system_->shutdown();
}

uint32_t Node::index() const {
  return core_->index();
}
void Node::set_index(uint32_t index) {
  core_->set_index(index);
  system_->set_node(index);
}
const std::vector<std::string>& Node::endpoints() const {
  return core_->endpoints();
}
void Node::set_node_endpoints(uint32_t node, std::vector<std::string> endpoints) {
  core_->set_node_endpoints(node, std::move(endpoints));
}
void Node::redirect(uint32_t node, std::vector<std::string> endpoints) {
  core_->redirect(node, std::move(endpoints));
}
absl::Status Node::connect(uint32_t node) {
  return core_->connection_to(node).status();
}
void Node::fail_node(uint32_t node, const absl::Status& reason) {
  core_->fail_node(node, reason);
}
void Node::relocate(ActorId id, uint32_t node) {
  core_->relocate(id, node);
}
void Node::set_hooks(NodeHooks hooks) {
  core_->set_hooks(std::move(hooks));
}
uint64_t Node::calls_served() const {
  return core_->calls_served();
}

detail::IntrusivePtr<detail::ActorHandle> Node::handle(ActorId id, const ActorTypeInfo& type,
                                                       uint32_t node) {
  return core_->resolve(id, type, node);
}

detail::ActorResolver& Node::actor_resolver() {
  return *core_;
}

}  // namespace troupe::cluster
