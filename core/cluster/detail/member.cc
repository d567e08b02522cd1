#include "core/cluster/detail/member.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/cluster/detail/etcd_head.h"
#include "core/cluster/detail/resources.h"
#include "core/cluster/launch_env.h"
#include "spdlog/spdlog.h"
#include "transport/address.h"
#include "transport/auth.h"

namespace troupe::cluster {
namespace {

// Member::current(): the latest member joined in this process.
std::mutex current_mu;
Member* current_member = nullptr;

}  // namespace

uint64_t NodeDeathListeners::add(Listener listener) {
  std::lock_guard<std::mutex> lock(mu_);
  listeners_.emplace(next_, std::move(listener));
  return next_++;
}

void NodeDeathListeners::remove(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  listeners_.erase(id);
}

void NodeDeathListeners::notify(uint32_t node, const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [id, listener] : listeners_)
    listener(node, reason);
}

absl::StatusOr<std::string> find_head_address(const std::string& given,
                                              std::optional<LaunchEnv>* launched) {
  if (launched != nullptr) launched->reset();
  if (!given.empty()) return given;
  if (const char* env = std::getenv("TROUPE_HEAD"); env != nullptr && *env != '\0') return env;
  absl::StatusOr<std::optional<LaunchEnv>> launch = detect_launch_env();
  if (!launch.ok()) return launch.status();
  if (launch->has_value()) {
    if (launched != nullptr) *launched = *launch;
    return (*launch)->head_address();
  }
  std::ifstream in(std::string(kDefaultStateDir) + "/head_address");
  std::string address;
  if (in && std::getline(in, address) && !address.empty()) return address;
  return absl::InvalidArgumentError(
      "no head address: give one (--head HOST:PORT, e.g. 127.0.0.1:6380) or set TROUPE_HEAD "
      "(no head runs on this machine, and no Slurm, torchrun or JobSet launch environment "
      "names one)");
}

absl::StatusOr<std::string> find_cluster_token(const std::string& token_file) {
  const char* env = std::getenv("TROUPE_TOKEN");
  std::string local = std::string(kDefaultStateDir) + "/token";
  if (token_file.empty() && (env == nullptr || *env == '\0') &&
      ::access(local.c_str(), R_OK) == 0) {
    return transport::read_token_file(local);
  }
  return transport::resolve_token(token_file);
}

std::string head_error_text(const absl::Status& s) {
  std::string text(s.message());
  const std::string prefix = "cannot reach node 0 (for actor-0-1): ";
  return text.starts_with(prefix) ? text.substr(prefix.size()) : text;
}

absl::StatusOr<std::string> local_address_towards(const std::string& head) {
  absl::StatusOr<transport::HostPort> hp = transport::parse_address("tcp://" + head, "tcp");
  if (!hp.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--head ", head, ": expected HOST:PORT, e.g. 10.0.0.1:6380"));
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(hp->host.c_str(), std::to_string(hp->port).c_str(), &hints, &found) != 0 ||
      found == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot resolve the head's host ", hp->host));
  }
  // A UDP "connection" sends nothing; it only picks the route and source address.
  std::string local;
  int fd = ::socket(found->ai_family, SOCK_DGRAM, 0);
  if (fd >= 0 && ::connect(fd, found->ai_addr, found->ai_addrlen) == 0) {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    char text[INET6_ADDRSTRLEN] = {};
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
      if (addr.ss_family == AF_INET) {
        inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&addr)->sin_addr, text, sizeof(text));
      } else {
        inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&addr)->sin6_addr, text, sizeof(text));
      }
      local = text;
    }
  }
  if (fd >= 0) ::close(fd);
  freeaddrinfo(found);
  if (local.empty()) return absl::UnavailableError(absl::StrCat("no route to the head at ", head));
  return local;
}

absl::StatusOr<std::unique_ptr<Member>> Member::join_when_head_up(
    const MemberOptions& options, absl::Duration wait,
    const std::function<void(const absl::Status&)>& waiting,
    const std::function<bool()>& cancelled) {
  const absl::Time deadline = absl::Now() + wait;
  absl::StatusOr<std::unique_ptr<Member>> member = join(options);
  for (bool told = false; !member.ok() && absl::IsUnavailable(member.status()) &&
                          absl::Now() < deadline && !(cancelled && cancelled());) {
    if (!told && waiting) waiting(member.status());
    told = true;
    absl::SleepFor(absl::Milliseconds(500));
    member = join(options);
  }
  return member;
}

absl::StatusOr<std::unique_ptr<Member>> Member::join(MemberOptions options) {
  if (options.token.empty()) {
    return absl::FailedPreconditionError(
        "no cluster token: pass --token-file PATH (the head writes one to its state directory) "
        "or set TROUPE_TOKEN");
  }
  // Given the heads' etcd: the one that leads now.
  std::vector<std::string> heads;
  if (is_etcd_url(options.head)) {
    absl::StatusOr<std::string> leader = etcd_leader_address(options.head);
    if (!leader.ok()) return leader.status();
    heads.push_back(*leader);
  } else {
    heads = absl::StrSplit(options.head, ',', absl::SkipWhitespace());
  }
  if (heads.empty()) {
    return absl::InvalidArgumentError("no head address: --head HOST:PORT, e.g. 10.0.0.1:6380");
  }
  for (const std::string& h : heads) {
    if (!transport::parse_address("tcp://" + h, "tcp").ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--head ", h, ": expected HOST:PORT, e.g. 10.0.0.1:6380"));
    }
  }
  if (options.host.empty()) {
    absl::StatusOr<std::string> local = local_address_towards(heads.front());
    if (!local.ok()) return local.status();
    options.host = *local;
  }
  if (options.kind == NodeKind::kWorker) {
    absl::StatusOr<Resources> offered = Resources::parse(options.resources);
    if (!offered.ok()) return offered.status();
    const double gpus = offered->get(kGpu);
    if (std::fabs(gpus - std::round(gpus)) > Resources::kEpsilon || gpus > kMaxNodeGpus) {
      return absl::InvalidArgumentError(
          absl::StrCat("GPU=", gpus, ": a worker offers a whole number of GPUs, up to ",
                       kMaxNodeGpus, " (as Ray's --num-gpus)"));
    }
    options.gpus = gpus_for_count(options.gpus, static_cast<int>(std::llround(gpus)));
  } else {
    options.gpus.clear();
  }
  if (options.name.empty()) {
    options.name =
        absl::StrCat(std::string(to_string(options.kind)), " ", options.host, " pid ", ::getpid());
  }
  std::unique_ptr<Member> member(new Member(std::move(options)));
  member->heads_ = std::move(heads);
  if (absl::Status s = member->start(); !s.ok()) return s;
  {
    std::lock_guard<std::mutex> lock(current_mu);
    current_member = member.get();
  }
  return member;
}

absl::Status Member::start() {
  auto node = Node::start({.index = kUnassignedNode,
                           .token = options_.token,
                           .name = options_.name,
                           .host = options_.host,
                           .transports = options_.transports,
                           .threads = options_.threads,
                           .connect_timeout = options_.timeout});
  if (!node.ok()) return node.status();
  node_ = *std::move(node);
  node_->set_node_endpoints(kHeadNode, {"tcp://" + heads_.front()});
  head_ = node_->ref<HeadService>(head_service_id(), kHeadNode);

  auto registration = register_with_a_head();
  if (!registration.ok()) return registration.status();
  node_->set_index(registration->index);
  head_incarnation_ = registration->head_incarnation;
  apply(registration->events);

  ActorRef<HeadService> head = head_;
  uint32_t self = registration->index;
  absl::Duration timeout = options_.timeout;
  absl::Duration restart_wait = options_.restart_wait;
  node_->set_hooks(NodeHooks{
      .locate = [head, timeout, restart_wait,
                 head_away = head_away_since_](ActorId id) -> absl::StatusOr<uint32_t> {
        // While it is being restarted the head answers Unavailable: ask again.
        // A head that answers no heartbeats either (down, restarting) can
        // neither say where the actor is nor restart it: the call fails now,
        // not restart_wait later (recovery waits for the head, saying so).
        absl::Time deadline = absl::Now() + restart_wait;
        for (int attempt = 0;; ++attempt) {
          absl::StatusOr<uint32_t> where = head.call(&HeadService::locate, id.value).get(timeout);
          if (where.ok() || !absl::IsUnavailable(where.status()) || absl::Now() >= deadline ||
              head_away->load() != 0) {
            return where;
          }
          absl::SleepFor(absl::Milliseconds(std::min(10 << std::min(attempt, 5), 200)));
        }
      },
      .task_retries = [head, timeout](ActorId id) -> absl::StatusOr<int> {
        return head.call(&HeadService::task_retries, id.value).get(timeout);
      },
      .kill = [head](ActorId id, bool restart,
                     std::string) { head.tell(&HeadService::kill_actor, id.value, !restart); },
      .monitor =
          [head](ActorId id, DeathCallback cb) {
            static_cast<void>(head.call(&HeadService::watch_actor, id.value)
                                  .then([id, cb](absl::StatusOr<std::string> reason) {
                                    cb(id, reason.ok() ? ActorDiedError(*reason) : reason.status());
                                  }));
          },
      .peer_lost =
          [head, self](uint32_t peer, absl::Status why) {
            if (peer != kHeadNode) {
              head.tell(&HeadService::report_lost, self, peer, std::string(why.message()));
            }
          },
      .node_endpoints =
          [head, timeout](uint32_t peer) {
            return head.call(&HeadService::node_endpoints, peer).get(timeout);
          },
  });
  absl::Duration interval = absl::Milliseconds(registration->heartbeat_ms);
  heartbeat_ = std::thread([this, interval] { heartbeats(interval); });
  spdlog::info("joined the cluster at {} as {} {}", current_head(), to_string(options_.kind),
               registration->index);
  return absl::OkStatus();
}

absl::StatusOr<Registration> Member::register_with_a_head() {
  absl::Status last;
  for (size_t tried = 0; tried < heads_.size(); ++tried) {
    if (tried > 0) try_next_head();
    const std::string head = current_head();
    auto registration = head_.call(&HeadService::register_node, info()).get(options_.timeout);
    if (registration.ok()) return registration;
    absl::Status s = registration.status();
    if (absl::IsPermissionDenied(s)) {
      return absl::PermissionDeniedError(
          absl::StrCat("the head at ", head, " refused this node: ", head_error_text(s)));
    }
    last = absl::Status(
        IsActorDied(s) ? absl::StatusCode::kUnavailable : s.code(),
        absl::StrCat("cannot register with the head at ", head, ": ", head_error_text(s)));
    // Another head may lead: one that is down or standing by does not answer.
    if (!absl::IsUnavailable(last) && !absl::IsDeadlineExceeded(last)) return last;
  }
  return last;
}

void Member::try_next_head() {
  if (is_etcd_url(options_.head)) {
    // The leader key names the head that leads now (none: wait for one).
    absl::StatusOr<std::string> leader = etcd_leader_address(options_.head);
    if (!leader.ok() || *leader == current_head()) return;
    std::lock_guard<std::mutex> lock(heads_mu_);
    heads_.front() = *leader;
    node_->redirect(kHeadNode, {"tcp://" + *leader});
    return;
  }
  if (heads_.size() < 2) return;
  const size_t next = (head_at_.load() + 1) % heads_.size();
  head_at_.store(next);
  node_->redirect(kHeadNode, {"tcp://" + heads_[next]});
}

std::string Member::current_head() const {
  std::lock_guard<std::mutex> lock(heads_mu_);
  return heads_.empty() ? options_.head : heads_[head_at_.load() % heads_.size()];
}

void Member::apply(const std::vector<ClusterEvent>& events) {
  for (const ClusterEvent& e : events) {
    switch (e.kind) {
      case ClusterEvent::kNodeJoined:
        if (e.node.index != node_->index()) {
          node_->set_node_endpoints(e.node.index, e.node.endpoints);
        }
        break;
      case ClusterEvent::kNodeDied:
        if (e.node.index == node_->index()) {
          declared_dead("the head declared this node dead: " + e.reason);
        } else {
          node_->fail_node(e.node.index, absl::UnavailableError(e.reason));
          death_listeners_->notify(e.node.index, e.reason);
        }
        break;
      case ClusterEvent::kActorMoved:
        node_->relocate(ActorId{e.actor}, e.to_node);
        break;
      case ClusterEvent::kActorDied:
        break;  // calls to it are refused by its node
      case ClusterEvent::kNodeReady:
      case ClusterEvent::kNodeDraining:
        break;  // (for drivers that watch the membership)
    }
    if (e.kind != ClusterEvent::kActorMoved && e.kind != ClusterEvent::kActorDied) {
      membership_version_.fetch_add(1);
    }
    seen_version_ = std::max(seen_version_, e.version);
  }
}

void Member::declared_dead(const std::string& why) {
  // The rest of the cluster has given up on this node: its collective
  // operations can never complete, and the actors waiting in them must
  // return for the node to stop.
  death_listeners_->notify(node_->index(), why);
  stop_->request(why, /*dead=*/true);
}

NodeInfo Member::info() const {
  NodeInfo info;
  info.index = node_->index();
  info.kind = options_.kind;
  info.name = options_.name;
  info.host = options_.host;
  info.pid = ::getpid();
  info.endpoints = node_->endpoints();
  info.resources = options_.resources;
  info.gpus = options_.gpus;
  return info;
}

void Member::rejoin(uint64_t incarnation) {
  RejoinRequest request;
  request.info = info();
  request.actors = hosted_->list();
  auto reply = head_.call(&HeadService::rejoin_node, request).get(options_.timeout);
  if (!reply.ok()) {
    if (absl::IsUnavailable(reply.status()) || absl::IsDeadlineExceeded(reply.status())) {
      return;  // the head went away again
    }
    stop_->request(absl::StrCat("the restarted head at ", current_head(),
                                " refused this node: ", head_error_text(reply.status())));
    return;
  }
  head_incarnation_ = incarnation;
  seen_version_ = 0;
  apply(reply->events);
  ++rejoins_;
  spdlog::info("rejoined the restarted head at {} as {} {} with {} actors", current_head(),
               to_string(options_.kind), node_->index(), request.actors.size());
}

void Member::heartbeats(absl::Duration interval) {
  absl::Time last_contact = absl::Now();
  bool away = false;  // the head has not answered since last_contact
  while (!leaving_.load() && !stop_->requested.load()) {
    absl::Time next = absl::Now() + interval;
    auto reply = head_.call(&HeadService::heartbeat, node_->index(), seen_version_)
                     .get(std::max(interval * 10, absl::Seconds(1)));
    if (reply.ok()) {
      last_contact = absl::Now();
      if (away) spdlog::info("the head at {} answers again", current_head());
      away = false;
      head_away_since_->store(0);
      if (reply->head_incarnation != head_incarnation_) {
        rejoin(reply->head_incarnation);  // tried again with the next heartbeat if it failed
      } else if (!reply->known) {
        declared_dead("the head no longer knows this node (declared dead)");
        break;
      } else {
        apply(reply->events);
        seen_version_ = std::max(seen_version_, reply->version);
        if (reply->heartbeat_ms > 0) interval = absl::Milliseconds(reply->heartbeat_ms);
      }
    } else {
      try_next_head();  // with standby heads, another may lead now
      if (absl::Now() - last_contact > options_.head_grace) {
        stop_->request(absl::StrCat("lost contact with the head at ", options_.head, " for ",
                                    absl::FormatDuration(options_.head_grace), ": ",
                                    head_error_text(reply.status())),
                       /*dead=*/false, /*lost=*/true);
        break;
      }
      if (!away) {
        away = true;
        head_away_since_->store(std::max<int64_t>(1, absl::ToUnixNanos(last_contact)));
        spdlog::warn(
            "lost contact with the head at {} ({}); serving peers meanwhile, and rejoining when it "
            "is back (giving up after {})",
            options_.head, head_error_text(reply.status()),
            absl::FormatDuration(options_.head_grace));
      }
    }
    while (!leaving_.load() && absl::Now() < next)
      absl::SleepFor(std::min(next - absl::Now(), absl::Milliseconds(20)));
  }
}

std::optional<absl::Time> Member::head_away_since() const {
  const int64_t since = head_away_since_->load();
  if (since == 0) return std::nullopt;
  return absl::FromUnixNanos(since);
}

absl::Status Member::ready() {
  return head_.call(&HeadService::node_ready, node_->index()).get(options_.timeout);
}

std::optional<std::string> Member::wait_stopped(absl::Duration timeout) {
  absl::Time deadline = absl::Now() + timeout;
  while (!stop_->requested.load()) {
    if (absl::Now() >= deadline) return std::nullopt;
    absl::SleepFor(std::min(deadline - absl::Now(), absl::Milliseconds(20)));
  }
  std::lock_guard<std::mutex> lock(stop_->mu);
  return stop_->reason;
}

absl::StatusOr<ActorLocation> find_named_actor(Member& member, std::string_view name,
                                               const ActorTypeInfo& type, absl::Duration timeout) {
  absl::StatusOr<ActorLocation> where =
      member.head().call(&HeadService::get_actor, std::string(name)).get(timeout);
  if (!where.ok()) return where.status();
  if (where->type != type.name) {
    return absl::InvalidArgumentError(
        absl::StrCat("actor '", std::string(name), "' is a ", where->type, ", not a ", type.name));
  }
  return where;
}

Member* Member::current() {
  std::lock_guard<std::mutex> lock(current_mu);
  return current_member;
}

Member::~Member() {
  {
    std::lock_guard<std::mutex> lock(current_mu);
    if (current_member == this) current_member = nullptr;
  }
  leaving_.store(true);
  if (heartbeat_.joinable()) heartbeat_.join();
  if (node_ && !stop_->requested.load()) {
    // Leave in order, so the head need not wait for missed heartbeats.
    static_cast<void>(
        head_.call(&HeadService::unregister_node, node_->index(), std::string("left the cluster"))
            .get(absl::Seconds(2)));
  }
  stop_->request("leaving");
  node_.reset();
}

}  // namespace troupe::cluster
