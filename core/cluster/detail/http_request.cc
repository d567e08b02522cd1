#include "core/cluster/detail/http_request.h"

#include <cctype>
#include <vector>

#include "absl/strings/str_cat.h"

namespace troupe::cluster {
namespace {

constexpr std::string_view kEndOfHead = "\r\n\r\n";

// (The project's Abseil has a string_view of its own: these helpers take std's.)
std::vector<std::string_view> split(std::string_view s, std::string_view separator) {
  std::vector<std::string_view> parts;
  for (size_t at = 0;;) {
    const size_t next = s.find(separator, at);
    parts.push_back(s.substr(at, next == std::string_view::npos ? next : next - at));
    if (next == std::string_view::npos) return parts;
    at = next + separator.size();
  }
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t'))
    s.remove_suffix(1);
  return s;
}

bool equals_ignoring_case(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i])))
      return false;
  }
  return true;
}

bool is_token_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) ||
         std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

bool is_token(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!is_token_char(c)) return false;
  }
  return true;
}

// A target is printable ASCII without spaces: what a URL may hold on the wire.
bool is_target(std::string_view s) {
  if (s.empty() || s.front() != '/') return false;
  for (char c : s) {
    if (c <= ' ' || c >= 0x7f) return false;
  }
  return true;
}

// Whether a Connection header's comma-separated options include `option`.
bool has_option(std::string_view value, std::string_view option) {
  for (std::string_view part : split(value, ",")) {
    if (equals_ignoring_case(trim(part), option)) return true;
  }
  return false;
}

const char* reason_phrase(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 431:
      return "Request Header Fields Too Large";
    case 503:
      return "Service Unavailable";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return "Error";
  }
}

}  // namespace

absl::StatusOr<std::optional<HttpRequest>> parse_http_request(std::string_view received) {
  const size_t end = received.find(kEndOfHead);
  if (end == std::string_view::npos) {
    if (received.size() >= kMaxRequestBytes) {
      return absl::ResourceExhaustedError(
          absl::StrCat("a request head is at most ", kMaxRequestBytes, " bytes"));
    }
    return std::nullopt;
  }
  if (end + kEndOfHead.size() > kMaxRequestBytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("a request head is at most ", kMaxRequestBytes, " bytes"));
  }
  std::string_view head = received.substr(0, end);
  std::vector<std::string_view> lines = split(head, "\r\n");
  // The request line: METHOD SP TARGET SP HTTP/1.x
  std::vector<std::string_view> parts = split(lines[0], " ");
  if (parts.size() != 3 || !is_token(parts[0]) || parts[1].empty()) {
    return absl::InvalidArgumentError("a request line is METHOD /path HTTP/1.1");
  }
  HttpRequest request;
  int minor_version = 0;
  if (parts[2] == "HTTP/1.1") {
    minor_version = 1;
  } else if (parts[2] != "HTTP/1.0") {
    if (parts[2].starts_with("HTTP/")) {
      return absl::UnimplementedError("HTTP/1.0 and HTTP/1.1 are spoken here");
    }
    return absl::InvalidArgumentError("a request line is METHOD /path HTTP/1.1");
  }
  if (!is_target(parts[1])) {
    return absl::InvalidArgumentError("the target must be a path: /metrics or /");
  }
  request.method = std::string(parts[0]);
  request.path = std::string(parts[1].substr(0, parts[1].find_first_of("?#")));
  // Headers: only those that change how the connection is used are read.
  bool close = false;
  bool keep_alive = false;
  for (size_t i = 1; i < lines.size(); ++i) {
    const size_t colon = lines[i].find(':');
    if (colon == std::string_view::npos || !is_token(lines[i].substr(0, colon))) {
      return absl::InvalidArgumentError("a header line is Name: value");
    }
    std::string_view name = lines[i].substr(0, colon);
    std::string_view value = trim(lines[i].substr(colon + 1));
    if (equals_ignoring_case(name, "Connection")) {
      close = close || has_option(value, "close");
      keep_alive = keep_alive || has_option(value, "keep-alive");
    } else if (equals_ignoring_case(name, "Transfer-Encoding")) {
      return absl::InvalidArgumentError("requests here have no body");
    } else if (equals_ignoring_case(name, "Content-Length")) {
      if (value.empty() || value.find_first_not_of('0') != std::string_view::npos) {
        return absl::InvalidArgumentError("requests here have no body");
      }
    }
  }
  if (request.method != "GET" && request.method != "HEAD") {
    return absl::UnimplementedError(absl::StrCat(request.method, " is not served: GET or HEAD"));
  }
  request.keep_alive = minor_version == 1 ? !close : keep_alive && !close;
  request.head_bytes = end + kEndOfHead.size();
  return request;
}

HttpResponse error_response(const absl::Status& error) {
  HttpResponse response;
  switch (error.code()) {
    case absl::StatusCode::kResourceExhausted:
      response.status = 431;
      break;
    case absl::StatusCode::kUnimplemented:
      response.status = std::string(error.message()).starts_with("HTTP/") ? 505 : 405;
      break;
    default:
      response.status = 400;
  }
  response.body = absl::StrCat(error.message(), "\n");
  return response;
}

std::string serialize(const HttpResponse& response, bool keep_alive, bool head_only) {
  std::string out = absl::StrCat("HTTP/1.1 ", response.status, " ", reason_phrase(response.status),
                                 "\r\nContent-Type: ", response.content_type,
                                 "\r\nContent-Length: ", response.body.size(), "\r\n");
  if (response.status == 405) absl::StrAppend(&out, "Allow: GET, HEAD\r\n");
  absl::StrAppend(&out, "Connection: ", keep_alive ? "keep-alive" : "close", "\r\n\r\n");
  if (!head_only) out += response.body;
  return out;
}

}  // namespace troupe::cluster
