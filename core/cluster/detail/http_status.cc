#include "core/cluster/detail/http_status.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/cluster/detail/resources.h"

namespace troupe::cluster {
namespace {

constexpr int kPollMillis = 100;
constexpr size_t kMaxRequestBytes = 8192;

// "CPU 1/2, GPU 0/1, memory 2G/8G": in use out of total.
std::string usage_of(const std::string& total_text, const std::string& available_text) {
  absl::StatusOr<Resources> total = Resources::parse(total_text);
  absl::StatusOr<Resources> available = Resources::parse(available_text);
  if (!total.ok()) return total_text;
  std::vector<std::string> parts;
  for (const auto& [name, amount] : total->amounts()) {
    double used = amount - (available.ok() ? available->get(name) : amount);
    Resources u, t;
    u.set(name, used < 0 ? 0 : used);
    t.set(name, amount);
    std::string us = u.to_string(), ts = t.to_string();
    parts.push_back(
        absl::StrCat(name, " ", us.substr(us.find('=') + 1), "/", ts.substr(ts.find('=') + 1)));
  }
  return absl::StrJoin(parts, ", ");
}

}  // namespace

std::string render_status(const ClusterStatus& s) {
  std::string out;
  absl::StrAppendFormat(&out, "Nodes\n");
  absl::StrAppendFormat(&out, "  %-5s %-7s %-6s %-34s %-9s %s\n", "NODE", "KIND", "STATE", "NAME",
                        "ACTORS", "RESOURCES (used/total)");
  for (const NodeStatus& n : s.nodes) {
    std::string res = n.info.kind == NodeKind::kWorker && n.state == NodeState::kAlive
                          ? usage_of(n.info.resources, n.available)
                          : "";
    if (n.state == NodeState::kDead) res = "dead: " + n.death_reason;
    absl::StrAppendFormat(
        &out, "  %-5u %-7s %-6s %-34s %-9lld %s\n", n.info.index,
        std::string(to_string(n.info.kind)).c_str(), std::string(to_string(n.state)).c_str(),
        n.info.name.substr(0, 34).c_str(), static_cast<long long>(n.actors), res.c_str());
  }
  std::map<ActorState, int> by_state;
  for (const ActorStatus& a : s.actors)
    ++by_state[a.state];
  std::vector<std::string> counts;
  for (const auto& [state, n] : by_state)
    counts.push_back(absl::StrCat(n, " ", std::string(to_string(state))));
  absl::StrAppendFormat(&out, "\nActors: %zu (%s)\n", s.actors.size(),
                        counts.empty() ? "none" : absl::StrJoin(counts, ", ").c_str());
  if (!s.actors.empty()) {
    absl::StrAppendFormat(&out, "  %-20s %-24s %-16s %-5s %-10s %-8s %s\n", "ID", "TYPE", "NAME",
                          "NODE", "STATE", "RESTARTS", "NOTE");
    for (const ActorStatus& a : s.actors) {
      absl::StrAppendFormat(&out, "  %-20s %-24s %-16s %-5u %-10s %-8d %s\n",
                            to_string(ActorId{a.id}).c_str(), a.type.substr(0, 24).c_str(),
                            a.name.substr(0, 16).c_str(), a.node,
                            std::string(to_string(a.state)).c_str(), a.restarts,
                            a.state == ActorState::kAlive ? "" : a.death_reason.c_str());
    }
  }
  absl::StrAppendFormat(&out, "\nPlacement groups: %zu\n", s.placement_groups.size());
  for (const PlacementGroupStatus& g : s.placement_groups) {
    std::vector<std::string> nodes;
    for (uint32_t n : g.bundle_nodes)
      nodes.push_back(std::to_string(n));
    absl::StrAppendFormat(&out, "  pg-%llu %s %s %s bundles [%s] on nodes [%s]\n",
                          static_cast<unsigned long long>(g.id), g.name.c_str(), g.strategy.c_str(),
                          g.placed ? "PLACED" : "PENDING", absl::StrJoin(g.bundles, "; ").c_str(),
                          absl::StrJoin(nodes, ", ").c_str());
  }
  std::vector<const NodeStatus*> drivers;
  for (const NodeStatus& n : s.nodes) {
    if (n.info.kind == NodeKind::kDriver && n.state == NodeState::kAlive) drivers.push_back(&n);
  }
  absl::StrAppendFormat(&out, "\nJobs (connected drivers): %zu\n", drivers.size());
  for (const NodeStatus* d : drivers)
    absl::StrAppendFormat(&out, "  node %u: %s\n", d->info.index, d->info.name.c_str());
  absl::StrAppendFormat(&out, "\nRecent events\n");
  size_t from = s.events.size() > 10 ? s.events.size() - 10 : 0;
  for (size_t i = from; i < s.events.size(); ++i)
    absl::StrAppendFormat(&out, "  %s\n", s.events[i].c_str());
  return out;
}

std::string render_metrics(const ClusterStatus& s) {
  std::string out;
  auto gauge = [&](const char* name, const char* help) {
    absl::StrAppend(&out, "# HELP ", name, " ", help, "\n# TYPE ", name, " gauge\n");
  };
  gauge("troupe_nodes", "Nodes by kind and state.");
  std::map<std::pair<std::string, std::string>, int> nodes;
  for (const NodeStatus& n : s.nodes)
    ++nodes[{std::string(to_string(n.info.kind)), std::string(to_string(n.state))}];
  for (const auto& [key, count] : nodes)
    absl::StrAppend(&out, "troupe_nodes{kind=\"", key.first, "\",state=\"", key.second, "\"} ",
                    count, "\n");
  gauge("troupe_node_resource_total", "Resources a live worker offers.");
  gauge("troupe_node_resource_available", "Resources not held by actors or placement groups.");
  for (const NodeStatus& n : s.nodes) {
    if (n.state != NodeState::kAlive || n.info.kind != NodeKind::kWorker) continue;
    absl::StatusOr<Resources> total = Resources::parse(n.info.resources);
    absl::StatusOr<Resources> available = Resources::parse(n.available);
    if (!total.ok() || !available.ok()) continue;
    for (const auto& [name, amount] : total->amounts()) {
      absl::StrAppend(&out, "troupe_node_resource_total{node=\"", n.info.index, "\",resource=\"",
                      name, "\"} ", amount, "\n");
      absl::StrAppend(&out, "troupe_node_resource_available{node=\"", n.info.index,
                      "\",resource=\"", name, "\"} ", available->get(name), "\n");
    }
  }
  gauge("troupe_actors", "Actors by state.");
  std::map<std::string, int> actors;
  for (const ActorStatus& a : s.actors)
    ++actors[std::string(to_string(a.state))];
  for (const auto& [state, count] : actors)
    absl::StrAppend(&out, "troupe_actors{state=\"", state, "\"} ", count, "\n");
  gauge("troupe_placement_groups", "Placement groups by state.");
  int placed = 0;
  for (const PlacementGroupStatus& g : s.placement_groups)
    placed += g.placed ? 1 : 0;
  absl::StrAppend(&out, "troupe_placement_groups{state=\"placed\"} ", placed, "\n",
                  "troupe_placement_groups{state=\"pending\"} ",
                  s.placement_groups.size() - static_cast<size_t>(placed), "\n");
  return out;
}

absl::StatusOr<std::unique_ptr<HttpStatusServer>> HttpStatusServer::start(
    const std::string& host, uint16_t port, std::function<absl::StatusOr<ClusterStatus>()> status) {
  std::unique_ptr<HttpStatusServer> server(new HttpStatusServer());
  server->status_ = std::move(status);
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError("socket failed");
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  if (::inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat("HTTP: not an IPv4 address: ", host));
  }
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(fd, 16) != 0) {
    std::string why = std::strerror(errno);
    ::close(fd);
    return absl::UnavailableError(
        absl::StrCat("HTTP: cannot listen on ", host, ":", port, ": ", why));
  }
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  server->fd_ = fd;
  server->port_ = ntohs(addr.sin_port);
  server->thread_ = std::thread([s = server.get()] { s->serve(); });
  return server;
}

HttpStatusServer::~HttpStatusServer() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
  if (fd_ >= 0) ::close(fd_);
}

std::string HttpStatusServer::respond(const std::string& path) {
  auto reply = [](const char* code, const char* type, const std::string& body) {
    return absl::StrCat("HTTP/1.0 ", code, "\r\nContent-Type: ", type,
                        "\r\nContent-Length: ", body.size(), "\r\nConnection: close\r\n\r\n", body);
  };
  if (path != "/" && path != "/metrics") {
    return reply("404 Not Found", "text/plain", "not found: try / or /metrics\n");
  }
  absl::StatusOr<ClusterStatus> s = status_();
  if (!s.ok()) {
    return reply("503 Service Unavailable", "text/plain", absl::StrCat(s.status().message(), "\n"));
  }
  if (path == "/metrics") return reply("200 OK", "text/plain; version=0.0.4", render_metrics(*s));
  return reply("200 OK", "text/plain; charset=utf-8", render_status(*s));
}

void HttpStatusServer::serve() {
  while (!stop_.load()) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, kPollMillis) <= 0) continue;
    int conn = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (conn < 0) continue;
    // Read the request line (bounded in size and time), answer, close.
    std::string request;
    char buf[1024];
    while (request.find("\r\n") == std::string::npos && request.size() < kMaxRequestBytes) {
      pollfd c{conn, POLLIN, 0};
      if (::poll(&c, 1, 1000) <= 0) break;
      ssize_t n = ::recv(conn, buf, sizeof(buf), 0);
      if (n <= 0) break;
      request.append(buf, static_cast<size_t>(n));
    }
    std::string path = "/";
    if (request.starts_with("GET ")) {
      size_t end = request.find(' ', 4);
      path = request.substr(4, end == std::string::npos ? std::string::npos : end - 4);
    }
    std::string response = request.starts_with("GET ")
                               ? respond(path)
                               : std::string("HTTP/1.0 405 Method Not Allowed\r\n\r\n");
    for (size_t sent = 0; sent < response.size();) {
      ssize_t n = ::send(conn, response.data() + sent, response.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) break;
      sent += static_cast<size_t>(n);
    }
    ::close(conn);
  }
}

}  // namespace troupe::cluster
