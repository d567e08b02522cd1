// Transport benchmark: round-trip latency (8 B) and bandwidth (4 MiB, 64 MiB)
// for each troupe transport, side by side in the same invocation with
// ucx_perftest (Debian ucx-utils) on the same UCX transport (with and without
// peer-failure handling, which troupe's ucx transport uses) and with a plain
// TCP socket ping-pong.
//
//   transport_bench [--round-trips 20000] [--frames 64] [--repeat 5]
//                   [--transports tcp,ucx] [--no-peer] [--json FILE]
//
// --no-peer leaves the peers out, to profile troupe's side alone.
//
// troupe's numbers are taken the way an actor runtime uses a connection:
// replies are sent from the receive callback (no thread hand-off in the loop),
// the sender keeps a window of frames in flight and its buffers are borrowed,
// not copied (from a transport::Buffer, as perftest sends from memory UCX
// allocated). The round trip is given twice: the median of all round trips
// against perftest's median (its reported latency), and the run's time over
// its round trips against perftest's overall figure (the same for it). Latency is the full round
// trip; ratio = troupe / peer, so below 1 is better for latency and above 1 is better for
// bandwidth.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_split.h"
#include "bench/bench_util.h"
#include "bench/ucx_perftest.h"
#include "transport/connection.h"

using namespace troupe::transport;
using troupe::bench::Row;

namespace {

constexpr char kToken[] = "bench-token";
constexpr int kWindow = 4;  // frames in flight in the bandwidth test

TransportOptions options(const char* name) {
  TransportOptions o;
  o.token = kToken;
  o.local_name = name;
  return o;
}

struct Pair {
  std::unique_ptr<Transport> server;
  std::unique_ptr<Transport> client;
  std::unique_ptr<Listener> listener;
};

// A server transport whose connections answer every frame: an echo of the
// frame (`echo`), or an empty acknowledgement.
Pair make_pair(const std::string& kind, bool echo) {
  Pair p;
  auto s = make_transport(kind, options("bench server"));
  auto c = make_transport(kind, options("bench client"));
  if (!s.ok() || !c.ok()) {
    std::fprintf(stderr, "transport_bench: %s\n",
                 (s.ok() ? c.status() : s.status()).ToString().c_str());
    std::exit(1);
  }
  p.server = *std::move(s);
  p.client = *std::move(c);
  std::string address = kind == "inproc" ? "inproc://transport-bench" : kind + "://127.0.0.1:0";
  auto l = p.server->listen(address, [echo](std::shared_ptr<Connection> conn) {
    std::weak_ptr<Connection> weak = conn;
    return ConnectionCallbacks{[weak, echo](Frame& f) {
                                 auto c2 = weak.lock();
                                 if (!c2) return;
                                 static_cast<void>(c2->send(echo ? std::move(f) : Frame()));
                               },
                               [](absl::Status) {}};
  });
  if (!l.ok()) {
    std::fprintf(stderr, "transport_bench: listen: %s\n", l.status().ToString().c_str());
    std::exit(1);
  }
  p.listener = *std::move(l);
  return p;
}

// Sends `warm + total` frames from `next_frame` with `window` in flight, each
// reply releasing the next send from the receive callback. A window of 1 is
// a ping-pong.
struct Driver {
  std::shared_ptr<Connection> conn;
  std::function<Frame()> next_frame;
  long warm = 0;
  long total = 0;  // timed replies, after the warm ones
  std::atomic<long> sent{0};
  long received = 0;              // one callback at a time
  std::vector<int64_t> arrivals;  // steady-clock ns of the last warm reply and each timed one
  std::promise<void> done;

  void send_next() {
    if (sent.fetch_add(1) < warm + total) static_cast<void>(conn->send(next_frame()));
  }
};

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct WindowRun {
  double seconds = 0;
  double median_gap_us = 0;  // between consecutive replies: a round trip, for a window of 1
};

// Runs `total` timed frames behind a warm-up, as ucx_perftest warms up
// before it measures (on its own buffers, allocated once): a tenth of the run
// and at least a window, so that the buffers a receiver lands frames in are
// the ones it reuses, not fresh memory faulted in page by page while the
// clock runs. The sends go on without a pause from the warm-up into the
// timed frames; the clock starts at the last warm reply.
WindowRun run_window(Pair& p, std::function<Frame()> next_frame, long total, int window) {
  auto d = std::make_shared<Driver>();
  d->next_frame = std::move(next_frame);
  d->warm = std::max<long>(window, (total + 9) / 10);
  d->total = total;
  d->arrivals.reserve(static_cast<size_t>(total) + 1);
  // The callbacks hold the driver weakly: it holds the connection.
  std::weak_ptr<Driver> weak = d;
  auto conn = p.client->connect(p.listener->address(),
                                ConnectionCallbacks{[weak](Frame&) {
                                                      auto dr = weak.lock();
                                                      if (!dr) return;
                                                      long n = ++dr->received;
                                                      if (n >= dr->warm)
                                                        dr->arrivals.push_back(now_ns());
                                                      if (n == dr->warm + dr->total) {
                                                        dr->done.set_value();
                                                      } else {
                                                        dr->send_next();
                                                      }
                                                    },
                                                    [](absl::Status) {}},
                                absl::Seconds(10));
  if (!conn.ok()) {
    std::fprintf(stderr, "transport_bench: connect: %s\n", conn.status().ToString().c_str());
    std::exit(1);
  }
  d->conn = *conn;
  for (int i = 0; i < window; ++i)
    d->send_next();
  d->done.get_future().wait();
  d->conn->close();
  WindowRun run;
  run.seconds = static_cast<double>(d->arrivals.back() - d->arrivals.front()) / 1e9;
  std::vector<double> gaps;
  gaps.reserve(d->arrivals.size());
  for (size_t i = 1; i < d->arrivals.size(); ++i)
    gaps.push_back(static_cast<double>(d->arrivals[i] - d->arrivals[i - 1]));
  if (!gaps.empty()) run.median_gap_us = troupe::bench::median(gaps) / 1e3;
  return run;
}

// The 8-byte round trip in microseconds: the median of all round trips, as
// ucx_perftest reports its latency, or (`mean`) the run's time over them.
double troupe_rtt_us(const std::string& kind, long round_trips, bool mean) {
  Pair p = make_pair(kind, /*echo=*/true);
  auto ping = [] {
    Frame f;
    f.buffers.emplace_back(8);
    std::memset(f.buffers.back().data(), 1, 8);
    return f;
  };
  WindowRun run = run_window(p, ping, round_trips, 1);
  return mean ? run.seconds * 1e6 / static_cast<double>(round_trips) : run.median_gap_us;
}

// Bytes per second moving `frames` frames of `size` bytes, kWindow in flight.
double troupe_bandwidth(const std::string& kind, size_t size, long frames) {
  Pair p = make_pair(kind, /*echo=*/false);
  // The payload lives in a troupe Buffer, as ucx_perftest's lives in memory
  // UCX allocated: each library's own allocation for what it sends.
  auto source = std::make_shared<Buffer>(size);
  std::memset(source->data(), 0x5a, size);
  auto borrowed = [source] {
    Frame f;
    f.buffers.push_back(Buffer::borrow(source, source->data(), source->size()));
    return f;
  };
  double seconds = run_window(p, borrowed, frames, kWindow).seconds;
  return static_cast<double>(size) * static_cast<double>(frames) / seconds;
}

// --- plain TCP sockets --------------------------------------------------------

int listen_socket(uint16_t* port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  ::listen(fd, 1);
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  *port = ntohs(a.sin_port);
  return fd;
}

int connect_socket(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

bool read_all(int fd, void* buf, size_t n) {
  auto* p = static_cast<char*>(buf);
  while (n > 0) {
    ssize_t r = ::recv(fd, p, n, 0);
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

bool write_all(int fd, const void* buf, size_t n) {
  const auto* p = static_cast<const char*>(buf);
  while (n > 0) {
    ssize_t r = ::send(fd, p, n, MSG_NOSIGNAL);
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

double socket_rtt_us(long round_trips) {
  uint16_t port = 0;
  int lfd = listen_socket(&port);
  std::thread server([&] {
    int fd = ::accept(lfd, nullptr, nullptr);
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    char buf[8];
    for (long i = 0; i < round_trips && read_all(fd, buf, 8); ++i)
      write_all(fd, buf, 8);
    ::close(fd);
  });
  int fd = connect_socket(port);
  char buf[8] = {1};
  auto start = std::chrono::steady_clock::now();
  for (long i = 0; i < round_trips; ++i) {
    write_all(fd, buf, 8);
    read_all(fd, buf, 8);
  }
  double us = troupe::bench::seconds_since(start) * 1e6 / static_cast<double>(round_trips);
  ::close(fd);
  server.join();
  ::close(lfd);
  return us;
}

double socket_bandwidth(size_t size, long frames) {
  uint16_t port = 0;
  int lfd = listen_socket(&port);
  std::thread server([&] {
    int fd = ::accept(lfd, nullptr, nullptr);
    std::vector<char> buf(size);
    char ack = 1;
    for (long i = 0; i < frames && read_all(fd, buf.data(), size); ++i)
      write_all(fd, &ack, 1);
    ::close(fd);
  });
  int fd = connect_socket(port);
  std::vector<char> buf(size, 0x5a);
  char ack;
  auto start = std::chrono::steady_clock::now();
  // The same window as troupe's: kWindow messages ahead of their acks.
  long acked = 0;
  for (long i = 0; i < frames; ++i) {
    write_all(fd, buf.data(), size);
    if (i + 1 - acked >= kWindow) {
      read_all(fd, &ack, 1);
      ++acked;
    }
  }
  while (acked < frames) {
    read_all(fd, &ack, 1);
    ++acked;
  }
  double bps =
      static_cast<double>(size) * static_cast<double>(frames) / troupe::bench::seconds_since(start);
  ::close(fd);
  server.join();
  ::close(lfd);
  return bps;
}

}  // namespace

int main(int argc, char** argv) {
  troupe::bench::Flags flags(argc, argv);
  if (flags.has("--help")) {
    std::printf(
        "usage: transport_bench [--round-trips N] [--frames N] [--repeat N] "
        "[--transports tcp,ucx] [--no-peer] [--json FILE]\n");
    return 0;
  }
  long round_trips = flags.get_long("--round-trips", 20000);
  long frames = flags.get_long("--frames", 64);
  int repeat = static_cast<int>(flags.get_long("--repeat", 5));
  std::string json = flags.get("--json", "");
  std::vector<std::string> kinds = absl::StrSplit(flags.get("--transports", "tcp,ucx"), ',');
  if (round_trips < 1 || frames < 1 || repeat < 1) {
    std::fprintf(stderr, "transport_bench: sizes must be positive\n");
    return 2;
  }
  const bool no_peer = flags.has("--no-peer");
  bool have_perftest = !no_peer && troupe::bench::ucx_perftest_available();
  if (!have_perftest && !no_peer) {
    std::printf("ucx_perftest (ucx-utils) not found: its columns are skipped\n");
  }
  std::printf("transport_bench: %ld round trips, %ld frames per bandwidth run, %d repeats\n",
              round_trips, frames, repeat);

  const size_t kSizes[] = {size_t{4} << 20, size_t{64} << 20};
  std::vector<Row> rows;
  auto median_of = [&](auto fn) {
    std::vector<double> v;
    for (int i = 0; i < repeat; ++i)
      v.push_back(fn());
    return troupe::bench::median(v);
  };
  for (const std::string& kind : kinds) {
    // The peer: ucx_perftest over the same UCX transport (UCX_TLS=tcp for our
    // tcp), and for tcp also a plain socket ping-pong.
    std::string tls = kind == "tcp" ? "tcp" : "";
    Row lat{kind + " 8 B round trip", "us (lower is better)",
            median_of([&] { return troupe_rtt_us(kind, round_trips, false); }), 0};
    if (have_perftest) {
      lat.peer = median_of([&] { return troupe::bench::perftest_rtt_us(tls, round_trips); });
    }
    rows.push_back(lat);
    Row mean{kind + " 8 B round trip, mean", "us (lower is better)",
             median_of([&] { return troupe_rtt_us(kind, round_trips, true); }), 0};
    if (have_perftest) {
      mean.peer =
          median_of([&] { return troupe::bench::perftest_rtt_us(tls, round_trips, false, true); });
    }
    rows.push_back(mean);
    if (kind == "ucx" && have_perftest) {
      rows.push_back(
          Row{"ucx 8 B round trip vs perftest -e", "us (lower is better)", lat.troupe,
              median_of([&] { return troupe::bench::perftest_rtt_us(tls, round_trips, true); })});
    }
    if (kind == "tcp" && !no_peer) {
      rows.push_back(Row{"tcp 8 B round trip, mean, vs socket", "us (lower is better)", mean.troupe,
                         median_of([&] { return socket_rtt_us(round_trips); })});
    }
    for (size_t size : kSizes) {
      long n = size >= (size_t{64} << 20) ? std::max<long>(frames / 8, 4) : frames;
      std::string label = kind + " bandwidth " + std::to_string(size >> 20) + " MiB";
      Row bw{label, "GB/s", median_of([&] { return troupe_bandwidth(kind, size, n); }) / 1e9, 0};
      if (have_perftest) {
        bw.peer = median_of([&] { return troupe::bench::perftest_bandwidth(tls, size, n); }) / 1e9;
      }
      rows.push_back(bw);
      if (kind == "ucx" && have_perftest) {
        rows.push_back(Row{label + " vs perftest -e", "GB/s", bw.troupe,
                           median_of([&] {
                             return troupe::bench::perftest_bandwidth(tls, size, n, true);
                           }) / 1e9});
      }
      if (kind == "tcp" && !no_peer) {
        rows.push_back(Row{label + " vs socket", "GB/s", bw.troupe,
                           median_of([&] { return socket_bandwidth(size, n); }) / 1e9});
      }
    }
    std::fflush(stdout);
  }
  troupe::bench::print_table("peer", rows);
  if (!json.empty() &&
      !troupe::bench::write_json(json, "transport_bench", "ucx_perftest / socket", rows)) {
    std::fprintf(stderr, "transport_bench: cannot write %s\n", json.c_str());
    return 1;
  }
  return 0;
}
