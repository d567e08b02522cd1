#include "core/cluster/detail/etcd_client.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <functional>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "nlohmann/json.hpp"

namespace troupe::cluster {
namespace {

using nlohmann::json;

std::string b64(const std::string& s) {
  return absl::Base64Escape(s);
}

std::string unb64(const std::string& s) {
  std::string out;
  absl::Base64Unescape(s, &out);
  return out;
}

// etcd's gateway writes 64-bit numbers as strings.
int64_t number(const json& j, const char* field) {
  auto it = j.find(field);
  if (it == j.end()) return 0;
  if (it->is_number()) return it->get<int64_t>();
  int64_t n = 0;
  if (it->is_string()) static_cast<void>(absl::SimpleAtoi(it->get<std::string>(), &n));
  return n;
}

EtcdKv kv_of(const json& j) {
  EtcdKv kv;
  kv.key = unb64(j.value("key", ""));
  kv.value = unb64(j.value("value", ""));
  kv.create_revision = number(j, "create_revision");
  kv.mod_revision = number(j, "mod_revision");
  kv.version = number(j, "version");
  kv.lease = number(j, "lease");
  return kv;
}

std::vector<EtcdKv> kvs_of(const json& j) {
  std::vector<EtcdKv> out;
  if (auto it = j.find("kvs"); it != j.end() && it->is_array()) {
    for (const json& kv : *it)
      out.push_back(kv_of(kv));
  }
  return out;
}

json op_json(const EtcdOp& op) {
  switch (op.kind) {
    case EtcdOp::Kind::kPut: {
      json put = {{"key", b64(op.key)}, {"value", b64(op.value)}};
      if (op.lease != 0) put["lease"] = std::to_string(op.lease);
      return {{"request_put", put}};
    }
    case EtcdOp::Kind::kDeleteRange: {
      json del = {{"key", b64(op.key)}};
      if (!op.range_end.empty()) del["range_end"] = b64(op.range_end);
      return {{"request_delete_range", del}};
    }
    case EtcdOp::Kind::kRange: {
      json range = {{"key", b64(op.key)}};
      if (!op.range_end.empty()) range["range_end"] = b64(op.range_end);
      return {{"request_range", range}};
    }
  }
  return {};
}

json compare_json(const EtcdCompare& c) {
  static constexpr const char* kTargets[] = {"VERSION", "CREATE", "MOD", "VALUE"};
  static constexpr const char* kResults[] = {"EQUAL", "NOT_EQUAL", "LESS", "GREATER"};
  json j = {{"key", b64(c.key)},
            {"target", kTargets[static_cast<int>(c.target)]},
            {"result", kResults[static_cast<int>(c.result)]}};
  switch (c.target) {
    case EtcdCompare::Target::kVersion:
      j["version"] = std::to_string(c.number);
      break;
    case EtcdCompare::Target::kCreateRevision:
      j["create_revision"] = std::to_string(c.number);
      break;
    case EtcdCompare::Target::kModRevision:
      j["mod_revision"] = std::to_string(c.number);
      break;
    case EtcdCompare::Target::kValue:
      j["value"] = b64(c.value);
      break;
  }
  return j;
}

// --- One HTTP/1.1 exchange ---------------------------------------------------------

class Socket {
 public:
  explicit Socket(int fd) : fd_(fd) {}
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  ~Socket() {
    if (fd_ >= 0) ::close(fd_);
  }
  int fd() const { return fd_; }

 private:
  int fd_;
};

// Waits until `fd` is ready for `events`, up to `deadline`.
absl::Status wait_for(int fd, short events, absl::Time deadline) {
  for (;;) {
    int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (ms <= 0) return absl::DeadlineExceededError("etcd did not answer in time");
    pollfd p{fd, events, 0};
    int n = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(ms, 1000)));
    if (n > 0) return absl::OkStatus();
    if (n < 0 && errno != EINTR) return absl::UnavailableError(std::strerror(errno));
  }
}

absl::StatusOr<int> connect_to(const std::string& host, uint16_t port, absl::Time deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
  if (rc != 0 || found == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot resolve ", host, ": ", ::gai_strerror(rc)));
  }
  int fd = ::socket(found->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    ::freeaddrinfo(found);
    return absl::UnavailableError(std::strerror(errno));
  }
  rc = ::connect(fd, found->ai_addr, found->ai_addrlen);
  ::freeaddrinfo(found);
  if (rc != 0 && errno != EINPROGRESS) {
    std::string why = std::strerror(errno);
    ::close(fd);
    return absl::UnavailableError(why);
  }
  if (absl::Status s = wait_for(fd, POLLOUT, deadline); !s.ok()) {
    ::close(fd);
    return s;
  }
  int err = 0;
  socklen_t len = sizeof(err);
  ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
  if (err != 0) {
    ::close(fd);
    return absl::UnavailableError(std::strerror(err));
  }
  return fd;
}

// Reads what the peer sends until `done(buffer)` or end of file.
absl::Status read_until(int fd, std::string& buffer, absl::Time deadline,
                        const std::function<bool(const std::string&)>& done) {
  char chunk[16384];
  while (!done(buffer)) {
    if (absl::Status s = wait_for(fd, POLLIN, deadline); !s.ok()) return s;
    ssize_t n = ::recv(fd, chunk, sizeof(chunk), 0);
    if (n == 0) return absl::OkStatus();
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      return absl::UnavailableError(std::strerror(errno));
    }
    buffer.append(chunk, static_cast<size_t>(n));
    if (buffer.size() > (64u << 20))
      return absl::ResourceExhaustedError("etcd's answer is too big");
  }
  return absl::OkStatus();
}

// An HTTP response as far as `raw` (headers included) holds it, its body
// de-chunked; of a streaming (chunked) answer, its first JSON message is
// enough.
struct Response {
  int status = 0;
  std::string body;
  bool complete = false;  // the whole body (or, chunked, at least one whole JSON message)
};

Response parse_response(const std::string& raw) {
  Response r;
  size_t end = raw.find("\r\n\r\n");
  if (end == std::string::npos) return r;
  std::string head = raw.substr(0, end);
  if (head.size() > 12) static_cast<void>(absl::SimpleAtoi(head.substr(9, 3), &r.status));
  std::string lower = head;
  for (char& c : lower)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  size_t body = end + 4;
  if (lower.find("transfer-encoding: chunked") != std::string::npos) {
    size_t at = body;
    for (;;) {
      size_t line = raw.find("\r\n", at);
      if (line == std::string::npos) break;
      size_t size = 0;
      if (!absl::SimpleHexAtoi(raw.substr(at, line - at), &size)) break;
      if (size == 0) {
        r.complete = true;
        break;
      }
      if (raw.size() < line + 2 + size) break;
      r.body += raw.substr(line + 2, size);
      at = line + 2 + size + 2;
      if (json::accept(r.body)) {  // a stream's first message is enough
        r.complete = true;
        break;
      }
    }
    return r;
  }
  size_t length_at = lower.find("content-length:");
  if (length_at != std::string::npos) {
    size_t line = lower.find("\r\n", length_at);
    size_t length = 0;
    std::string text = lower.substr(
        length_at + 15, line == std::string::npos ? std::string::npos : line - length_at - 15);
    if (absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &length) &&
        raw.size() >= body + length) {
      r.body = raw.substr(body, length);
      r.complete = true;
    }
    return r;
  }
  r.body = raw.substr(body);
  return r;
}

absl::StatusOr<std::string> exchange(const std::string& host, uint16_t port,
                                     const std::string& path, const std::string& body,
                                     absl::Duration timeout) {
  absl::Time deadline = absl::Now() + timeout;
  absl::StatusOr<int> fd = connect_to(host, port, deadline);
  if (!fd.ok()) return fd.status();
  Socket socket(*fd);
  std::string request =
      absl::StrCat("POST ", path, " HTTP/1.1\r\nHost: ", host, ":", port,
                   "\r\nContent-Type: application/json\r\nContent-Length: ", body.size(),
                   "\r\nConnection: close\r\n\r\n", body);
  for (size_t sent = 0; sent < request.size();) {
    if (absl::Status s = wait_for(socket.fd(), POLLOUT, deadline); !s.ok()) return s;
    ssize_t n = ::send(socket.fd(), request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      return absl::UnavailableError(std::strerror(errno));
    }
    sent += static_cast<size_t>(n);
  }
  std::string raw;
  if (absl::Status s = read_until(socket.fd(), raw, deadline,
                                  [](const std::string& r) { return parse_response(r).complete; });
      !s.ok()) {
    return s;
  }
  Response r = parse_response(raw);
  if (r.status == 0) return absl::UnavailableError("etcd closed the connection without answering");
  return r.body;
}

// etcd's error in `answer`, if it is one (the gateway gives gRPC's codes,
// which absl::StatusCode numbers the same way).
absl::Status error_in(const json& answer) {
  if (!answer.is_object()) return absl::InternalError("etcd's answer is not a JSON object");
  auto code = answer.find("code");
  auto error = answer.find("error");
  if (error == answer.end() && (code == answer.end() || *code == 0)) return absl::OkStatus();
  int c = code != answer.end() && code->is_number() ? code->get<int>() : 2;
  std::string message = answer.value("message", answer.value("error", std::string("etcd error")));
  if (c <= 0 || c > 16) c = 2;
  return absl::Status(static_cast<absl::StatusCode>(c), absl::StrCat("etcd: ", message));
}

absl::StatusOr<json> parse(const absl::StatusOr<std::string>& body) {
  if (!body.ok()) return body.status();
  json j = json::parse(*body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InternalError(absl::StrCat("etcd answered: ", *body));
  if (absl::Status s = error_in(j); !s.ok()) return s;
  return j;
}

}  // namespace

EtcdCompare EtcdCompare::absent(std::string key) {
  return {.key = std::move(key), .target = Target::kCreateRevision, .number = 0};
}
EtcdCompare EtcdCompare::mod_revision_is(std::string key, int64_t revision) {
  return {.key = std::move(key), .target = Target::kModRevision, .number = revision};
}
EtcdCompare EtcdCompare::value_is(std::string key, std::string value) {
  return {.key = std::move(key), .target = Target::kValue, .value = std::move(value)};
}

EtcdOp EtcdOp::put(std::string key, std::string value, int64_t lease) {
  return {.kind = Kind::kPut, .key = std::move(key), .value = std::move(value), .lease = lease};
}
EtcdOp EtcdOp::get(std::string key) {
  return {.kind = Kind::kRange, .key = std::move(key)};
}
EtcdOp EtcdOp::delete_key(std::string key) {
  return {.kind = Kind::kDeleteRange, .key = std::move(key)};
}
EtcdOp EtcdOp::delete_prefix(std::string prefix) {
  std::string end = etcd_prefix_end(prefix);
  if (prefix.empty()) prefix = std::string(1, '\0');  // (etcd takes no empty key)
  return {.kind = Kind::kDeleteRange, .key = std::move(prefix), .range_end = std::move(end)};
}

std::string etcd_prefix_end(const std::string& prefix) {
  std::string end = prefix;
  while (!end.empty()) {
    unsigned char last = static_cast<unsigned char>(end.back());
    if (last < 0xff) {
      end.back() = static_cast<char>(last + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');
}

absl::StatusOr<EtcdClient> EtcdClient::connect(std::vector<std::string> endpoints,
                                               absl::Duration timeout) {
  if (endpoints.empty()) return absl::InvalidArgumentError("no etcd endpoints");
  std::vector<Endpoint> parsed;
  for (const std::string& e : endpoints) {
    std::string rest = e;
    if (rest.starts_with("https://")) {
      return absl::InvalidArgumentError(
          absl::StrCat(e, ": https is not supported; give etcd's http client URL"));
    }
    if (rest.starts_with("http://")) rest = rest.substr(7);
    if (!rest.empty() && rest.back() == '/') rest.pop_back();
    size_t colon = rest.rfind(':');
    int port = 0;
    if (colon == std::string::npos || colon == 0 ||
        !absl::SimpleAtoi(rest.substr(colon + 1), &port) || port < 1 || port > 65535) {
      return absl::InvalidArgumentError(
          absl::StrCat(e, ": expected an etcd endpoint such as http://10.0.0.1:2379"));
    }
    std::string host = rest.substr(0, colon);
    if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
      host = host.substr(1, host.size() - 2);
    }
    parsed.push_back({host, static_cast<uint16_t>(port)});
  }
  return EtcdClient(std::move(endpoints), std::move(parsed), timeout);
}

absl::StatusOr<std::string> EtcdClient::post(const std::string& path,
                                             const std::string& body) const {
  absl::Status last = absl::UnavailableError("no etcd endpoint");
  for (size_t i = 0; i < parsed_.size(); ++i) {
    absl::StatusOr<std::string> answer =
        exchange(parsed_[i].host, parsed_[i].port, path, body, timeout_);
    if (answer.ok()) return answer;
    last = absl::Status(absl::StatusCode::kUnavailable,
                        absl::StrCat("etcd at ", endpoints_[i], ": ", answer.status().message()));
  }
  return last;
}

absl::StatusOr<int64_t> EtcdClient::put(const std::string& key, const std::string& value,
                                        int64_t lease) {
  json req = {{"key", b64(key)}, {"value", b64(value)}};
  if (lease != 0) req["lease"] = std::to_string(lease);
  absl::StatusOr<json> answer = parse(post("/v3/kv/put", req.dump()));
  if (!answer.ok()) return answer.status();
  return number(answer->value("header", json::object()), "revision");
}

absl::StatusOr<std::optional<EtcdKv>> EtcdClient::get(const std::string& key) {
  absl::StatusOr<json> answer = parse(post("/v3/kv/range", json{{"key", b64(key)}}.dump()));
  if (!answer.ok()) return answer.status();
  std::vector<EtcdKv> kvs = kvs_of(*answer);
  if (kvs.empty()) return std::nullopt;
  return kvs.front();
}

// etcd's first key of `prefix`: the prefix, or "\0" for every key (etcd takes no empty key).
std::string prefix_start(const std::string& prefix) {
  return prefix.empty() ? std::string(1, '\0') : prefix;
}

absl::StatusOr<std::vector<EtcdKv>> EtcdClient::get_prefix(const std::string& prefix) {
  json req = {{"key", b64(prefix_start(prefix))}, {"range_end", b64(etcd_prefix_end(prefix))}};
  absl::StatusOr<json> answer = parse(post("/v3/kv/range", req.dump()));
  if (!answer.ok()) return answer.status();
  return kvs_of(*answer);
}

absl::StatusOr<int64_t> EtcdClient::delete_prefix(const std::string& prefix) {
  json req = {{"key", b64(prefix_start(prefix))}, {"range_end", b64(etcd_prefix_end(prefix))}};
  absl::StatusOr<json> answer = parse(post("/v3/kv/deleterange", req.dump()));
  if (!answer.ok()) return answer.status();
  return number(*answer, "deleted");
}

absl::StatusOr<EtcdTxnResult> EtcdClient::txn(const EtcdTxn& t) {
  json req = {{"compare", json::array()}, {"success", json::array()}, {"failure", json::array()}};
  for (const EtcdCompare& c : t.compares)
    req["compare"].push_back(compare_json(c));
  for (const EtcdOp& op : t.success)
    req["success"].push_back(op_json(op));
  for (const EtcdOp& op : t.failure)
    req["failure"].push_back(op_json(op));
  absl::StatusOr<json> answer = parse(post("/v3/kv/txn", req.dump()));
  if (!answer.ok()) return answer.status();
  EtcdTxnResult r;
  r.succeeded = answer->value("succeeded", false);
  r.revision = number(answer->value("header", json::object()), "revision");
  if (auto responses = answer->find("responses"); responses != answer->end()) {
    for (const json& response : *responses) {
      if (auto range = response.find("response_range"); range != response.end()) {
        r.ranges.push_back(kvs_of(*range));
      }
    }
  }
  return r;
}

absl::StatusOr<int64_t> EtcdClient::grant_lease(absl::Duration ttl) {
  int64_t seconds = std::max<int64_t>(1, absl::ToInt64Seconds(absl::Ceil(ttl, absl::Seconds(1))));
  absl::StatusOr<json> answer =
      parse(post("/v3/lease/grant", json{{"TTL", std::to_string(seconds)}}.dump()));
  if (!answer.ok()) return answer.status();
  return number(*answer, "ID");
}

absl::Status EtcdClient::keep_alive(int64_t id) {
  absl::StatusOr<json> answer =
      parse(post("/v3/lease/keepalive", json{{"ID", std::to_string(id)}}.dump()));
  if (!answer.ok()) return answer.status();
  // A stream of answers: the first says whether the lease lives (TTL > 0).
  json result = answer->value("result", *answer);
  if (number(result, "TTL") <= 0) {
    return absl::NotFoundError(absl::StrCat("etcd: lease ", id, " has expired"));
  }
  return absl::OkStatus();
}

absl::Status EtcdClient::revoke_lease(int64_t id) {
  return parse(post("/v3/lease/revoke", json{{"ID", std::to_string(id)}}.dump())).status();
}

}  // namespace troupe::cluster
