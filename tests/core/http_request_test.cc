// The head's HTTP status protocol without a socket: what parse_http_request
// accepts, refuses and waits for, and what the answers look like on the wire.
#include "core/cluster/detail/http_request.h"

#include <gtest/gtest.h>

#include "core/cluster/detail/http_status.h"

namespace troupe::cluster {
namespace {

HttpRequest parsed(std::string_view bytes) {
  absl::StatusOr<std::optional<HttpRequest>> r = parse_http_request(bytes);
  EXPECT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r.ok() && r->has_value()) << "incomplete: " << bytes;
  return r.ok() && r->has_value() ? **r : HttpRequest{};
}

absl::Status refusal(std::string_view bytes) {
  absl::StatusOr<std::optional<HttpRequest>> r = parse_http_request(bytes);
  EXPECT_FALSE(r.ok()) << bytes;
  return r.ok() ? absl::OkStatus() : r.status();
}

TEST(HttpRequestTest, AScrapeIsParsedWithItsConnectionOptions) {
  HttpRequest r = parsed("GET /metrics?name[]=x HTTP/1.1\r\nHost: h\r\nAccept: */*\r\n\r\nGET /");
  EXPECT_EQ(r.method, "GET");
  EXPECT_EQ(r.path, "/metrics");
  EXPECT_TRUE(r.keep_alive);
  EXPECT_EQ(r.head_bytes, std::string_view("GET /metrics?name[]=x HTTP/1.1\r\nHost: h\r\n"
                                           "Accept: */*\r\n\r\n")
                              .size());
  EXPECT_FALSE(parsed("GET / HTTP/1.1\r\nconnection: Close\r\n\r\n").keep_alive);
  EXPECT_FALSE(parsed("GET / HTTP/1.0\r\n\r\n").keep_alive);
  EXPECT_TRUE(parsed("HEAD / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n").keep_alive);
  EXPECT_EQ(parsed("GET / HTTP/1.1\r\nContent-Length: 0\r\n\r\n").path, "/");
}

TEST(HttpRequestTest, AHeadNotYetWholeWaitsUntilTheBound) {
  for (std::string_view part : {"", "GET", "GET / HTTP/1.1\r\n", "GET / HTTP/1.1\r\nHost: x\r\n"}) {
    absl::StatusOr<std::optional<HttpRequest>> r = parse_http_request(part);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_FALSE(r->has_value()) << part;
  }
  // Past the bound it is refused, whole or not.
  std::string long_head = "GET /" + std::string(kMaxRequestBytes, 'a');
  EXPECT_EQ(refusal(long_head).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(refusal(long_head + " HTTP/1.1\r\n\r\n").code(), absl::StatusCode::kResourceExhausted);
}

TEST(HttpRequestTest, WhatIsNotAPlainGetIsRefusedSayingWhy) {
  EXPECT_EQ(error_response(refusal("POST / HTTP/1.1\r\n\r\n")).status, 405);
  EXPECT_EQ(error_response(refusal("GET / HTTP/2.0\r\n\r\n")).status, 505);
  EXPECT_EQ(error_response(refusal("GET / HTTP/1.1\r\nContent-Length: 5\r\n\r\n")).status, 400);
  EXPECT_EQ(error_response(refusal("GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n")).status,
            400);
  EXPECT_EQ(error_response(refusal("GET http://h/ HTTP/1.1\r\n\r\n")).status, 400);
  EXPECT_EQ(error_response(refusal("GET  / HTTP/1.1\r\n\r\n")).status, 400);
  EXPECT_EQ(error_response(refusal("GET / HTTP/1.1\r\nno colon\r\n\r\n")).status, 400);
  EXPECT_EQ(error_response(refusal(std::string("GET /\x01 HTTP/1.1\r\n\r\n"))).status, 400);
  HttpResponse too_long = error_response(refusal(std::string(kMaxRequestBytes, 'x')));
  EXPECT_EQ(too_long.status, 431);
  EXPECT_EQ(too_long.body, "a request head is at most 8192 bytes\n");
}

TEST(HttpRequestTest, AnswersCarryTheirLengthAndConnection) {
  StatusSource status = [] { return absl::StatusOr<ClusterStatus>(ClusterStatus{}); };
  std::string metrics = serialize(answer(parsed("GET /metrics HTTP/1.1\r\n\r\n"), status), true);
  EXPECT_TRUE(metrics.starts_with("HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n"))
      << metrics;
  EXPECT_NE(metrics.find("Connection: keep-alive\r\n\r\n# HELP troupe_nodes"), std::string::npos)
      << metrics;
  std::string missing = serialize(answer(parsed("GET /x HTTP/1.1\r\n\r\n"), status), false);
  EXPECT_TRUE(missing.starts_with("HTTP/1.1 404 Not Found\r\n")) << missing;
  EXPECT_NE(missing.find("Content-Length: 29\r\nConnection: close\r\n\r\nnot found: try / or "
                         "/metrics\n"),
            std::string::npos)
      << missing;
  std::string head = serialize(answer(parsed("HEAD / HTTP/1.1\r\n\r\n"), status), true, true);
  EXPECT_TRUE(head.ends_with("\r\n\r\n")) << head;
  StatusSource down = [] {
    return absl::StatusOr<ClusterStatus>(absl::DeadlineExceededError("x"));
  };
  EXPECT_EQ(answer(parsed("GET / HTTP/1.1\r\n\r\n"), down).status, 503);
}

}  // namespace
}  // namespace troupe::cluster
