// The head's HTTP status protocol without a socket: what parse_http_request
// accepts, refuses and waits for, and what the answers look like on the wire.
#include "core/cluster/detail/http_request.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>

#include "absl/time/clock.h"
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
  HttpSources status{.status = [] { return absl::StatusOr<ClusterStatus>(ClusterStatus{}); }};
  std::string metrics = serialize(answer(parsed("GET /metrics HTTP/1.1\r\n\r\n"), status), true);
  EXPECT_TRUE(metrics.starts_with("HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n"))
      << metrics;
  EXPECT_NE(metrics.find("Connection: keep-alive\r\n\r\n# HELP troupe_nodes"), std::string::npos)
      << metrics;
  std::string missing = serialize(answer(parsed("GET /x HTTP/1.1\r\n\r\n"), status), false);
  EXPECT_TRUE(missing.starts_with("HTTP/1.1 404 Not Found\r\n")) << missing;
  EXPECT_NE(missing.find("Connection: close\r\n\r\nnot found: try /, /status, /metrics"),
            std::string::npos)
      << missing;
  std::string head = serialize(answer(parsed("HEAD / HTTP/1.1\r\n\r\n"), status), true, true);
  EXPECT_TRUE(head.ends_with("\r\n\r\n")) << head;
  HttpSources down{
      .status = [] { return absl::StatusOr<ClusterStatus>(absl::DeadlineExceededError("x")); }};
  EXPECT_EQ(answer(parsed("GET /status HTTP/1.1\r\n\r\n"), down).status, 503);
  EXPECT_EQ(answer(parsed("GET / HTTP/1.1\r\n\r\n"), down).status, 200) << "the page itself";
  EXPECT_EQ(answer(parsed("GET /api/jobs/3 HTTP/1.1\r\n\r\n"), down).status, 404);
}

// A request sent on a connection of its own; its answer read later.
class HttpClient {
 public:
  HttpClient(uint16_t port, const std::string& path) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    const std::string request = "GET " + path + " HTTP/1.1\r\nConnection: close\r\n\r\n";
    EXPECT_EQ(::send(fd_, request.data(), request.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(request.size()));
  }
  ~HttpClient() { ::close(fd_); }
  // What the server sent within `timeout` ("" if nothing).
  std::string answer(absl::Duration timeout) {
    std::string out;
    const absl::Time deadline = absl::Now() + timeout;
    char buffer[4096];
    while (absl::Now() < deadline) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      ssize_t n = ::recv(fd_, buffer, sizeof(buffer), 0);
      if (n <= 0) break;
      out.append(buffer, static_cast<size_t>(n));
    }
    return out;
  }

 private:
  int fd_ = -1;
};

// A head slow to give its status holds up only the requests for it: a
// request for something else is answered meanwhile (the server's I/O thread
// does not wait on the head), and the requests that waited are answered by
// one asking of the head.
TEST(HttpStatusServerTest, ASlowStatusHoldsUpOnlyTheRequestsForIt) {
  std::mutex mu;
  std::condition_variable cv;
  bool released = false;
  std::atomic<int> asked{0};
  StatusSource slow = [&]() -> absl::StatusOr<ClusterStatus> {
    asked.fetch_add(1);
    std::unique_lock<std::mutex> lock(mu);
    cv.wait_for(lock, std::chrono::seconds(20), [&] { return released; });
    return ClusterStatus{};
  };
  auto server = HttpStatusServer::start("127.0.0.1", 0, {.status = slow});
  ASSERT_TRUE(server.ok()) << server.status();
  HttpClient metrics((*server)->port(), "/metrics");
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (asked.load() == 0 && absl::Now() < deadline)
    absl::SleepFor(absl::Milliseconds(5));
  ASSERT_EQ(asked.load(), 1);
  HttpClient status((*server)->port(), "/status");
  HttpClient missing((*server)->port(), "/nope");
  HttpClient page((*server)->port(), "/");
  EXPECT_TRUE(missing.answer(absl::Seconds(5)).starts_with("HTTP/1.1 404"));
  EXPECT_TRUE(page.answer(absl::Seconds(5)).starts_with("HTTP/1.1 200"))
      << "the dashboard's page needs nothing from the head";
  {
    std::lock_guard<std::mutex> lock(mu);
    released = true;
  }
  cv.notify_all();
  EXPECT_TRUE(metrics.answer(absl::Seconds(5)).starts_with("HTTP/1.1 200"));
  EXPECT_TRUE(status.answer(absl::Seconds(5)).starts_with("HTTP/1.1 200"));
  EXPECT_LE(asked.load(), 2);  // the second request may have come after the first answer
}

}  // namespace
}  // namespace troupe::cluster
