// Cross-process actor benchmark: a troupe cluster and Ray side by side in one
// invocation.
//
//   cluster_bench [--workers 2] [--calls 1000] [--big-calls N] [--window 64] [--fan 4]
//                 [--pairs 2] [--spawn 8] [--groups 8] [--repeat 3] [--json FILE] [--no-peer]
//                 [--transports ucx,tcp] [--threads N] [--cases sync_int64,sync_1k,...]
//
// troupe: a LocalCluster (a head and --workers worker processes of the troupe
// executable, on loopback) whose workers load libtroupe_bench_actors; this
// process is the driver. Ray: bench/ray_bench.py runs the same cases on a
// local Ray instance with as many CPUs, with the Python in $TROUPE_RAY_PYTHON
// (else python3); without Ray the peer column is skipped. Each case runs
// --repeat times; medians are reported with the troupe/Ray ratio (above 1:
// troupe is faster). Both sides run the same counts.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_split.h"
#include "bench/bench_actors.h"
#include "bench/bench_util.h"
#include "core/cluster/cluster.h"
#include "core/cluster/local_cluster.h"

namespace troupe::bench {
namespace {

constexpr absl::Duration kCallTimeout = absl::Seconds(60);

struct Config {
  int workers = 2;
  long calls = 1000;   // per repeat, for the small-argument cases
  long big_calls = 0;  // 1 MiB arguments; default calls / 10
  int window = 64;
  int fan = 4;
  int pairs = 2;
  int spawn = 8;
  int groups = 8;
  int repeat = 3;
  std::string transports = "ucx,tcp";  // for the driver and the workers, by preference
  int threads = 0;                     // actor threads per process; 0: the default
};

struct Case {
  const char* key;  // the name ray_bench.py prints it under
  std::string name;
  const char* unit;
};

[[noreturn]] void die(const std::string& what, const absl::Status& s) {
  std::fprintf(stderr, "cluster_bench: %s: %s\n", what.c_str(), s.ToString().c_str());
  std::exit(1);
}

template <class T>
T value_or_die(absl::StatusOr<T> r, const char* what) {
  if (!r.ok()) die(what, r.status());
  return *std::move(r);
}

// ---- troupe ------------------------------------------------------------------

class TroupeSide {
 public:
  explicit TroupeSide(const Config& c) : c_(c) {
    cluster::LocalClusterOptions o;
    o.workers = c.workers;
    o.troupe_binary = TROUPE_BINARY;
    o.worker_flags = {"--actor-lib-dir", TROUPE_BENCH_ACTORS_DIR, "--actor-lib",
                      TROUPE_BENCH_ACTORS_LIB};
    o.worker_flags.insert(o.worker_flags.end(), {"--transports", c.transports});
    if (c.threads > 0) {
      o.worker_flags.insert(o.worker_flags.end(), {"--threads", std::to_string(c.threads)});
    }
    o.echo_output = false;
    local_ = value_or_die(cluster::LocalCluster::start(o), "starting the local cluster");
    ClusterOptions client = local_->client_options();
    client.transports = absl::StrSplit(c.transports, ',', absl::SkipEmpty());
    client.threads = c.threads;
    driver_ = value_or_die(Cluster::connect(client), "connecting the driver");
    // One Echo per worker at least, more for the 1:N and N:N cases; actor i
    // lives on worker i % workers.
    int n = std::max({c.workers, c.fan, c.pairs});
    for (int i = 0; i < n; ++i) {
      int node = static_cast<int>(local_->worker_node(i % c.workers));
      echoes_.push_back(value_or_die(driver_->spawn<Echo>({.node = node}), "spawning an Echo"));
      check(echoes_.back().call(&Echo::ping, int64_t{0}), "first call");
    }
    payload_1k_.assign(1024, 'x');
    auto big = std::make_shared<std::vector<std::byte>>(size_t{1} << 20, std::byte{7});
    big_data_ = big->data();
    big_ = std::move(big);
  }

  ~TroupeSide() {
    driver_.reset();  // before the cluster it is connected to
    local_.reset();
  }

  // One measurement of case `key`: its rate.
  // A warm-up spawns and creates only a couple (the slow cases on Ray's side).
  double run(const std::string& key, bool warm_up = false) {
    if (key == "spawn") return spawn_rate(warm_up ? std::min(c_.spawn, 2) : c_.spawn);
    auto start = std::chrono::steady_clock::now();
    double ops = 0;
    if (key == "sync_int64") {
      ops = sync_calls(c_.calls, [&](long i) { return echoes_[0].call(&Echo::ping, int64_t{i}); });
    } else if (key == "sync_1k") {
      ops = sync_calls(c_.calls, [&](long) { return echoes_[0].call(&Echo::size, payload_1k_); });
    } else if (key == "sync_1m") {
      ops = sync_calls(c_.big_calls, [&](long) {
        return echoes_[0].call(&Echo::bytes,
                               transport::Buffer::borrow(big_, big_data_, size_t{1} << 20));
      });
    } else if (key == "async_int64") {
      ops = window_calls(c_.calls, [&](long) { return &echoes_[0]; });
    } else if (key == "fan_out") {
      ops = window_calls(c_.calls, [&](long i) { return &echoes_[i % c_.fan]; });
    } else if (key == "pairs") {
      std::vector<std::thread> threads;
      for (int t = 0; t < c_.pairs; ++t) {
        threads.emplace_back([&, t] { window_calls(c_.calls, [&](long) { return &echoes_[t]; }); });
      }
      for (std::thread& t : threads)
        t.join();
      ops = static_cast<double>(c_.calls) * c_.pairs;
    } else if (key == "groups") {
      int groups = warm_up ? std::min(c_.groups, 2) : c_.groups;
      for (int i = 0; i < groups; ++i) {
        auto pg = value_or_die(
            driver_->create_placement_group({"CPU=1", "CPU=1"}, cluster::PlacementStrategy::kPack),
            "create_placement_group");
        if (absl::Status s = driver_->wait_placement_group(pg, kCallTimeout); !s.ok()) {
          die("wait_placement_group", s);
        }
        if (absl::Status s = driver_->remove_placement_group(pg); !s.ok()) {
          die("remove_placement_group", s);
        }
      }
      ops = groups;
    }
    return ops / seconds_since(start);
  }

 private:
  static int64_t check(Future<int64_t> f, const char* what) {
    return value_or_die(std::move(f).get(kCallTimeout), what);
  }

  template <class F>
  double sync_calls(long n, F&& call) {
    for (long i = 0; i < n; ++i)
      check(call(i), "call");
    return static_cast<double>(n);
  }

  // Keeps `window` calls in flight; target(i) is the actor of call i.
  template <class F>
  double window_calls(long n, F&& target) {
    std::deque<Future<int64_t>> in_flight;
    for (long i = 0; i < n; ++i) {
      if (static_cast<int>(in_flight.size()) == c_.window) {
        check(std::move(in_flight.front()), "call");
        in_flight.pop_front();
      }
      in_flight.push_back(target(i)->call(&Echo::ping, int64_t{i}));
    }
    for (Future<int64_t>& f : in_flight)
      check(std::move(f), "call");
    return static_cast<double>(n);
  }

  // Spawns actors (Cluster::spawn returns once the actor is constructed) and
  // waits for each one's first reply; kills them after the clock stops.
  double spawn_rate(int n) {
    auto start = std::chrono::steady_clock::now();
    std::vector<ActorRef<Echo>> spawned;
    std::vector<Future<int64_t>> first;
    for (int i = 0; i < n; ++i) {
      spawned.push_back(value_or_die(driver_->spawn<Echo>({}), "spawn"));
      first.push_back(spawned.back().call(&Echo::ping, int64_t{i}));
    }
    for (Future<int64_t>& f : first)
      check(std::move(f), "first call");
    double elapsed = seconds_since(start);
    for (const ActorRef<Echo>& a : spawned)
      driver_->node().system().kill(a);
    return n / elapsed;
  }

  const Config& c_;
  std::unique_ptr<cluster::LocalCluster> local_;
  std::unique_ptr<Cluster> driver_;
  std::vector<ActorRef<Echo>> echoes_;
  std::string payload_1k_;
  std::shared_ptr<const void> big_;
  std::byte* big_data_ = nullptr;
};

// ---- Ray -------------------------------------------------------------------------

// Runs ray_bench.py; the rates by case key, or nothing (with the reason
// printed) when Ray is missing or fails.
std::optional<std::map<std::string, double>> run_ray(const Config& c,
                                                     const std::vector<Case>& cases,
                                                     std::string* version) {
  const char* env = std::getenv("TROUPE_RAY_PYTHON");
  std::string python = env != nullptr && *env != '\0' ? env : "python3";
  std::string probe = shell_quote(python) + " -c 'import ray' >/dev/null 2>&1";
  if (std::system(probe.c_str()) != 0) {
    std::printf("ray: not installed (set TROUPE_RAY_PYTHON to a python with ray) - peer skipped\n");
    return std::nullopt;
  }
  std::string keys;
  for (const Case& k : cases)
    keys += (keys.empty() ? "" : ",") + std::string(k.key);
  char log_path[] = "/tmp/cluster_bench_ray_XXXXXX";
  int fd = ::mkstemp(log_path);
  if (fd >= 0) ::close(fd);
  std::string cmd =
      shell_quote(python) + " " + shell_quote(TROUPE_RAY_BENCH_SCRIPT) + " --workers " +
      std::to_string(c.workers) + " --cpus-per-worker 2" + " --calls " + std::to_string(c.calls) +
      " --big-calls " + std::to_string(c.big_calls) + " --window " + std::to_string(c.window) +
      " --fan " + std::to_string(c.fan) + " --pairs " + std::to_string(c.pairs) + " --spawn " +
      std::to_string(c.spawn) + " --groups " + std::to_string(c.groups) + " --repeat " +
      std::to_string(c.repeat) + " --cases " + keys + " 2>" + shell_quote(log_path);
  std::printf("ray: running %s\n", cmd.c_str());
  std::fflush(stdout);
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) {
    std::printf("ray: cannot start %s - peer skipped\n", python.c_str());
    return std::nullopt;
  }
  const std::string out = read_all(pipe);
  int status = ::pclose(pipe);
  // The result is the last line that holds a JSON object.
  std::string json;
  for (size_t end = out.size(); end > 0;) {
    size_t begin = out.rfind('\n', end - 1);
    begin = begin == std::string::npos ? 0 : begin + 1;
    if (out.compare(begin, 1, "{") == 0) {
      json = out.substr(begin, end - begin);
      break;
    }
    if (begin == 0) break;
    end = begin - 1;
  }
  std::map<std::string, double> rates;
  for (const Case& k : cases) {
    if (auto v = json_number(json, k.key)) rates[k.key] = *v;
  }
  int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (code != 0 || rates.empty()) {
    std::printf("ray: failed (exit code %d; its log: %s) - peer skipped\n", code, log_path);
    return std::nullopt;
  }
  size_t at = json.find("\"ray_version\"");
  if (at != std::string::npos) {
    size_t q1 = json.find('"', json.find(':', at));
    size_t q2 = q1 == std::string::npos ? q1 : json.find('"', q1 + 1);
    if (q2 != std::string::npos) *version = json.substr(q1 + 1, q2 - q1 - 1);
  }
  std::remove(log_path);
  return rates;
}

}  // namespace
}  // namespace troupe::bench

using namespace troupe::bench;

int main(int argc, char** argv) {
  Flags flags(argc, argv);
  if (flags.has("--help")) {
    std::printf(
        "usage: cluster_bench [--workers N] [--calls N] [--big-calls N] [--window N] [--fan N]\n"
        "                     [--pairs N] [--spawn N] [--groups N] [--repeat N] [--json FILE]\n"
        "                     [--transports ucx,tcp] [--threads N] [--cases KEY,...] [--no-peer]\n"
        "cases: sync_int64 sync_1k sync_1m async_int64 fan_out pairs groups spawn\n"
        "Ray runs as the peer when $TROUPE_RAY_PYTHON (else python3) can import ray.\n");
    return 0;
  }
  Config c;
  c.workers = static_cast<int>(flags.get_long("--workers", c.workers));
  c.calls = flags.get_long("--calls", c.calls);
  c.big_calls = flags.get_long("--big-calls", std::max(c.calls / 10, 1L));
  c.window = static_cast<int>(flags.get_long("--window", c.window));
  c.fan = static_cast<int>(flags.get_long("--fan", c.fan));
  c.pairs = static_cast<int>(flags.get_long("--pairs", c.pairs));
  c.spawn = static_cast<int>(flags.get_long("--spawn", c.spawn));
  c.groups = static_cast<int>(flags.get_long("--groups", c.groups));
  c.repeat = static_cast<int>(flags.get_long("--repeat", c.repeat));
  c.transports = flags.get("--transports", c.transports);
  c.threads = static_cast<int>(flags.get_long("--threads", c.threads));
  std::string json = flags.get("--json", "");
  std::string only = flags.get("--cases", "");
  if (c.workers < 1 || c.calls < 1 || c.big_calls < 1 || c.window < 1 || c.fan < 1 || c.pairs < 1 ||
      c.spawn < 1 || c.groups < 1 || c.repeat < 1) {
    std::fprintf(stderr, "cluster_bench: every size must be at least 1\n");
    return 2;
  }

  const std::string w = std::to_string(c.window);
  const std::vector<Case> all_cases = {
      {"sync_int64", "1:1 sync call, int64", "calls/s"},
      {"sync_1k", "1:1 sync call, 1 KiB string", "calls/s"},
      {"sync_1m", "1:1 sync call, 1 MiB buffer", "calls/s"},
      {"async_int64", "1:1 async calls, window " + w, "calls/s"},
      {"fan_out", "1:" + std::to_string(c.fan) + " async calls, window " + w, "calls/s"},
      {"pairs",
       std::to_string(c.pairs) + ":" + std::to_string(c.pairs) + " async calls, window " + w,
       "calls/s"},
      {"groups", "placement group create+ready+remove", "groups/s"},
      {"spawn", "spawn + first call", "actors/s"},
  };
  std::vector<Case> cases;
  for (const Case& k : all_cases) {
    if (only.empty() ||
        ("," + only + ",").find("," + std::string(k.key) + ",") != std::string::npos) {
      cases.push_back(k);
    }
  }
  if (cases.empty()) {
    std::fprintf(stderr, "cluster_bench: --cases %s names no case\n", only.c_str());
    return 2;
  }

  std::printf(
      "cluster_bench: %d workers, %ld calls (%ld of 1 MiB), window %d, 1:%d, %d:%d, "
      "%d spawns, %d groups, %d repeats\n",
      c.workers, c.calls, c.big_calls, c.window, c.fan, c.pairs, c.pairs, c.spawn, c.groups,
      c.repeat);
  std::fflush(stdout);

  // troupe first, its cluster gone before Ray starts: the two never share the cores.
  std::map<std::string, double> ours;
  {
    TroupeSide troupe(c);
    for (const Case& k : cases) {
      troupe.run(k.key, /*warm_up=*/true);
      std::vector<double> rates;
      for (int i = 0; i < c.repeat; ++i)
        rates.push_back(troupe.run(k.key));
      ours[k.key] = median(rates);
      std::printf("troupe: %-40s %12.4g %s\n", k.name.c_str(), ours[k.key], k.unit);
      std::fflush(stdout);
    }
  }

  std::string ray_version;
  std::optional<std::map<std::string, double>> ray;
  if (!flags.has("--no-peer")) ray = run_ray(c, cases, &ray_version);
  std::vector<Row> rows;
  for (const Case& k : cases) {
    double peer = ray && ray->count(k.key) ? ray->at(k.key) : 0;
    rows.push_back(Row{k.name, k.unit, ours[k.key], peer});
  }
  print_table("Ray", rows);
  std::string peer = ray ? "Ray " + ray_version : "none";
  if (!json.empty() && !write_json(json, "cluster_bench", peer, rows)) {
    std::fprintf(stderr, "cluster_bench: cannot write %s\n", json.c_str());
    return 1;
  }
  return 0;
}
