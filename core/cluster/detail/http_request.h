// HTTP/1.x as the head's status endpoint speaks it: a request head parsed
// from the bytes received so far, and the response to it. No sockets here:
// the server (http_status.cc) feeds bytes in and writes what comes out, and
// the HTTP fuzz target feeds the parser any bytes at all.
//
// Only what a browser, curl or a Prometheus scraper sends is accepted: GET or
// HEAD of an origin-form target ("/metrics?x=1"), HTTP/1.0 or 1.1, no body.
// A request head is at most kMaxRequestBytes; anything else is answered with
// an error status and the connection closed.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace troupe::cluster {

// The largest request head read from a client (request line and headers).
inline constexpr size_t kMaxRequestBytes = 8192;

struct HttpRequest {
  std::string method;  // "GET" or "HEAD"
  std::string path;    // the target without its query: "/metrics"
  bool keep_alive = false;
  size_t head_bytes = 0;  // the request's length in the bytes parsed (head and its blank line)
};

// The request at the start of `received`, or nullopt while its head is not
// complete yet (and shorter than kMaxRequestBytes).
// Errors: ResourceExhausted for a head longer than kMaxRequestBytes (431),
// InvalidArgument for a malformed one or one with a body (400), Unimplemented
// for a method other than GET and HEAD (405) or another HTTP version (505).
absl::StatusOr<std::optional<HttpRequest>> parse_http_request(std::string_view received);

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

// The response for a parse error of parse_http_request(): its status and a
// one-line body saying what was wrong.
HttpResponse error_response(const absl::Status& error);

// The bytes of `response` on the wire; with `keep_alive` the connection
// stays open for the next request, else it says Connection: close. A HEAD
// request gets the headers alone (`head_only`).
std::string serialize(const HttpResponse& response, bool keep_alive, bool head_only = false);

}  // namespace troupe::cluster
