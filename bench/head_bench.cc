// The head at scale: a real `troupe head` (and a few real workers, as a
// cross-check) against thousands of simulated nodes (bench/head_sim.h) in
// this process, with Ray's published envelope printed beside ours.
//
//   head_bench [--nodes 2000] [--sizes 250,500,1000] [--steady-seconds 5]
//              [--actors 100000] [--actor-rate 1000] [--groups 10000]
//              [--crashes 20] [--hangs 20] [--partitions 5] [--stall-seconds 5]
//              [--soak-seconds 600] [--real-workers 2]
//              [--store etcd [--failovers 30]]
//
// For each cluster size (--sizes, then --nodes) a fresh head takes a
// registration storm (every node connecting within 1 s), then steady
// heartbeats: the head's CPU per heartbeat and its RSS. At --nodes it then
// takes faults - crashed nodes (connections reset), hung ones (silent,
// connections open), partitioned ones (hung, then back: they must be told
// they are dead), the head itself stopped (SIGSTOP) for --stall-seconds, and
// --soak-seconds of heartbeats with 100 ms of jitter - and counts any node
// declared dead that was not; then actor creation (latency at --actor-rate,
// then as fast as the head takes them, and the head's memory per actor) and
// placement groups of 4 bundles (rate, and no node over-committed).
//
// With --store etcd the heads keep their decisions in a real etcd started
// here (LocalEtcd; skipped, saying so, where none is installed), with a
// standby head beside the leader: the same figures then show what the store
// costs. At the end the leader is killed --failovers times, and the time
// from its death to the first request the new leader serves is measured.
//
// The head runs on core 0 and the simulator on core 1 (where there are two).
// The simulator measures its own lag: a window in which it sent heartbeats
// late measured itself, not the head, and is discarded.
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "bench/bench_util.h"
#include "bench/head_sim.h"
#include "core/cluster/detail/head.h"
#include "core/cluster/detail/node.h"
#include "core/cluster/detail/resources.h"
#include "core/cluster/local_cluster.h"
#include "core/cluster/local_etcd.h"

namespace troupe::bench {
namespace {

using cluster::ClusterStatus;

// Ray's published envelope (docs, "Scalability envelope" and its release
// benchmarks): 2,000 nodes; 576 actors/s and 22 placement groups/s measured
// on 64 nodes; a node declared dead 15-55 s after it stops.
constexpr double kRayActorsPerSecond = 576;
constexpr double kRayGroupsPerSecond = 22;
constexpr const char* kRayDeathDetection = "15-55 s";

struct Config {
  int nodes = 2000;
  std::vector<int> sizes = {250, 500, 1000};
  double steady_seconds = 5;
  int actors = 100000;
  int actor_rate = 1000;
  int groups = 10000;
  int crashes = 20;
  int hangs = 20;
  int partitions = 5;
  double stall_seconds = 5;
  double soak_seconds = 600;
  int real_workers = 2;
  std::string store;  // "" (the state directory) or "etcd://HOST:PORT" (LocalEtcd's)
  int failovers = 30;
};

[[noreturn]] void die(const std::string& what, const absl::Status& s) {
  std::fprintf(stderr, "head_bench: %s: %s\n", what.c_str(), s.ToString().c_str());
  std::exit(1);
}

// --- The head process ----------------------------------------------------------------

// CPU seconds the process has used (user + system).
double cpu_seconds(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t paren = text.rfind(')');
  if (paren == std::string::npos) return 0;
  std::vector<std::string> fields = absl::StrSplit(text.substr(paren + 2), ' ');
  // After the command: state is field 3, utime 14 and stime 15.
  double utime = 0, stime = 0;
  if (fields.size() < 13 || !absl::SimpleAtod(fields[11], &utime) ||
      !absl::SimpleAtod(fields[12], &stime)) {
    return 0;
  }
  return (utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

double rss_mib(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.starts_with("VmRSS:")) {
      std::istringstream fields(line.substr(6));
      double kib = 0;
      fields >> kib;
      return kib / 1024;
    }
  }
  return 0;
}

void pin_process(pid_t pid, int core) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(core, &set);
  for (const auto& task :
       std::filesystem::directory_iterator(absl::StrCat("/proc/", pid, "/task"))) {
    pid_t tid = 0;
    if (absl::SimpleAtoi(task.path().filename().string(), &tid)) {
      static_cast<void>(::sched_setaffinity(tid, sizeof(set), &set));
    }
  }
}

std::string read_token(const std::string& path) {
  std::ifstream in(path);
  std::string token;
  std::getline(in, token);
  return std::string(absl::StripAsciiWhitespace(token));
}

struct Bench {
  std::unique_ptr<cluster::LocalCluster> cluster;
  std::unique_ptr<SimFleet> fleet;
};

Bench start_bench(const Config& config, bool pinned) {
  static int started = 0;
  Bench b;
  cluster::LocalClusterOptions options{
      .workers = config.real_workers, .troupe_binary = TROUPE_BINARY, .echo_output = false};
  if (!config.store.empty()) {
    // A key prefix of its own for each fresh cluster, and a standby head.
    options.store = absl::StrCat(config.store, "/bench-", ::getpid(), "-", ++started, "/");
    options.heads = 2;
    // A leader stopped longer than its lease loses the lead (that is the
    // point): the stalled-head phase stops it for --stall-seconds, so its
    // lease outlasts that here.
    options.head_flags = {
        "--lease-ttl",
        absl::StrCat(static_cast<int>(std::ceil(std::max(2.0, config.stall_seconds + 3))), "s")};
  }
  auto cluster = cluster::LocalCluster::start(options);
  if (!cluster.ok()) die("cannot start the cluster", cluster.status());
  b.cluster = *std::move(cluster);
  if (pinned) pin_process(b.cluster->head_pid(), 0);
  auto fleet = SimFleet::start({.head = "tcp://" + b.cluster->leader_address(),
                                .token = read_token(b.cluster->token_file())});
  if (!fleet.ok()) die("cannot start the simulator", fleet.status());
  b.fleet = *std::move(fleet);
  return b;
}

// --- Checks --------------------------------------------------------------------------

struct Line {
  std::string what;
  std::string troupe;
  std::string goal;
  std::string ray;
  bool met = true;
};
std::vector<Line> lines;

void report(std::string what, std::string troupe, std::string goal, std::string ray, bool met) {
  lines.push_back({std::move(what), std::move(troupe), std::move(goal), std::move(ray), met});
}

std::string fmt(double v, const char* unit, int precision = 3) {
  return absl::StrCat(absl::StrFormat("%.*g", precision, v), unit);
}

// Whether the simulator kept its schedule in the window just measured.
bool kept_schedule(const SimFleet& fleet, const std::string& window) {
  Latencies lag = fleet.lag();
  double p99 = lag.quantile(0.99);
  if (p99 > 10) {
    std::printf("  DISCARDED %s: the simulator sent heartbeats late (p99 %.1f ms)\n",
                window.c_str(), p99);
    return false;
  }
  return true;
}

// Nodes heard of as dead that no fault was injected into.
int false_deaths(const SimFleet& fleet, const std::set<int>& faulted) {
  int n = 0;
  for (int slot : fleet.heard_dead())
    n += faulted.contains(slot) ? 0 : 1;
  return n;
}

// --- Phases --------------------------------------------------------------------------

struct SizeResult {
  int nodes = 0;
  double storm_s = 0;
  double register_p99_ms = 0;
  double cpu_us_per_heartbeat = 0;
  double heartbeats_per_s = 0;
  double rss_mib = 0;
  bool valid = true;
};

SizeResult storm_and_steady(Bench& b, int nodes, const Config& config) {
  SizeResult r;
  r.nodes = nodes;
  absl::Time start = absl::Now();
  if (absl::Status s = b.fleet->add_workers(nodes, absl::Seconds(1), absl::Seconds(120)); !s.ok()) {
    die(absl::StrCat("registering ", nodes, " nodes"), s);
  }
  r.storm_s = absl::ToDoubleSeconds(absl::Now() - start);
  r.register_p99_ms = b.fleet->register_rtt().quantile(0.99);
  absl::SleepFor(absl::Seconds(1));  // settle: every node on its heartbeat phase
  b.fleet->reset_counters();
  pid_t head = b.cluster->head_pid();
  double cpu0 = cpu_seconds(head);
  absl::Time t0 = absl::Now();
  absl::SleepFor(absl::Seconds(config.steady_seconds));
  double cpu = cpu_seconds(head) - cpu0;
  double elapsed = absl::ToDoubleSeconds(absl::Now() - t0);
  uint64_t answered = b.fleet->heartbeats_answered();
  r.heartbeats_per_s = static_cast<double>(answered) / elapsed;
  r.cpu_us_per_heartbeat = answered > 0 ? cpu * 1e6 / static_cast<double>(answered) : 0;
  r.rss_mib = rss_mib(head);
  r.valid = kept_schedule(*b.fleet, absl::StrCat("steady heartbeats at ", nodes, " nodes"));
  std::printf(
      "  %5d nodes: storm %.2f s (register p99 %.1f ms), %.0f heartbeats/s, head %.1f us "
      "CPU each, RSS %.1f MiB\n",
      nodes, r.storm_s, r.register_p99_ms, r.heartbeats_per_s, r.cpu_us_per_heartbeat, r.rss_mib);
  std::fflush(stdout);
  return r;
}

// Waits until every slot in `slots` was heard of as dead, or `timeout`;
// returns the detection latencies (ms) of those heard.
std::vector<double> wait_deaths(const SimFleet& fleet, const std::vector<int>& slots,
                                const std::vector<absl::Time>& when, absl::Duration timeout) {
  absl::Time deadline = absl::Now() + timeout;
  std::vector<double> out;
  while (absl::Now() < deadline) {
    size_t heard = 0;
    for (int s : slots)
      heard += fleet.death_heard(s).has_value() ? 1 : 0;
    if (heard == slots.size()) break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  for (size_t i = 0; i < slots.size(); ++i) {
    if (auto t = fleet.death_heard(slots[i]))
      out.push_back(absl::ToDoubleMilliseconds(*t - when[i]));
  }
  return out;
}

void failures(Bench& b, const Config& config, std::set<int>& faulted) {
  SimFleet& fleet = *b.fleet;
  int next = 0;  // the slots are used in order, each fault on nodes of its own
  auto take = [&](int n) {
    std::vector<int> slots;
    for (int i = 0; i < n && next < fleet.size(); ++i)
      slots.push_back(next++);
    faulted.insert(slots.begin(), slots.end());
    return slots;
  };
  // Crashes: connection reset.
  {
    std::vector<int> slots = take(config.crashes);
    std::vector<absl::Time> when;
    for (int s : slots) {
      when.push_back(absl::Now());
      fleet.crash(s);
      absl::SleepFor(absl::Milliseconds(100));
    }
    Latencies l{wait_deaths(fleet, slots, when, absl::Seconds(10))};
    double p99 = l.quantile(0.99) / 1000;
    report(absl::StrCat("crashed node declared dead, p99 (", l.ms.size(), "/", slots.size(), ")"),
           fmt(p99, " s"), "<= 0.2 s", kRayDeathDetection,
           l.ms.size() == slots.size() && p99 <= 0.2);
  }
  // Hangs: silent, connections open.
  {
    std::vector<int> slots = take(config.hangs);
    std::vector<absl::Time> when;
    for (int s : slots) {
      when.push_back(absl::Now());
      fleet.hang(s);
      absl::SleepFor(absl::Milliseconds(50));
    }
    Latencies l{wait_deaths(fleet, slots, when, absl::Seconds(20))};
    double p99 = l.quantile(0.99) / 1000;
    report(absl::StrCat("hung node declared dead, p99 (", l.ms.size(), "/", slots.size(), ")"),
           fmt(p99, " s"), "<= 3 s", kRayDeathDetection, l.ms.size() == slots.size() && p99 <= 3);
  }
  // Partitions: hung, declared dead, then back: told so.
  {
    std::vector<int> slots = take(config.partitions);
    std::vector<absl::Time> when;
    for (int s : slots) {
      when.push_back(absl::Now());
      fleet.hang(s);
    }
    wait_deaths(fleet, slots, when, absl::Seconds(20));
    for (int s : slots)
      fleet.heal(s);
    absl::SleepFor(absl::Seconds(2));
    int told = 0;
    for (int s : slots)
      told += fleet.told_unknown(s) ? 1 : 0;
    report("partitioned nodes told they are dead on return", absl::StrCat(told, "/", slots.size()),
           "all", "-", told == static_cast<int>(slots.size()));
  }
  int before = false_deaths(fleet, faulted);
  report("false deaths during the faults", absl::StrCat(before), "0", "-", before == 0);
  // The head stopped.
  if (config.stall_seconds > 0) {
    pid_t head = b.cluster->head_pid();
    ::kill(head, SIGSTOP);
    absl::SleepFor(absl::Seconds(config.stall_seconds));
    ::kill(head, SIGCONT);
    absl::SleepFor(absl::Seconds(3));
    int after = false_deaths(fleet, faulted) - before;
    report(absl::StrCat("nodes declared dead after the head stopped ", config.stall_seconds, " s"),
           absl::StrCat(after), "0", "(GCS busy: false deaths)", after == 0);
    before += after;
  }
  // Soak with jitter.
  if (config.soak_seconds > 0) {
    fleet.set_jitter(absl::Milliseconds(100));
    fleet.reset_counters();
    absl::Time end = absl::Now() + absl::Seconds(config.soak_seconds);
    absl::Time next_note = absl::Now() + absl::Seconds(30);
    while (absl::Now() < end) {
      absl::SleepFor(std::min(end - absl::Now(), absl::Seconds(1)));
      if (absl::Now() >= next_note) {
        next_note += absl::Seconds(30);
        std::printf("  soak: %.0f s left, %d false deaths so far\n",
                    absl::ToDoubleSeconds(end - absl::Now()),
                    false_deaths(fleet, faulted) - before);
        std::fflush(stdout);
      }
    }
    fleet.set_jitter(absl::ZeroDuration());
    int soak = false_deaths(fleet, faulted) - before;
    bool kept = kept_schedule(fleet, "the soak");
    report(absl::StrCat("false deaths in ", config.soak_seconds, " s with 100 ms jitter"),
           kept ? absl::StrCat(soak) : "discarded", "0", "-", kept && soak == 0);
  }
}

// Calls HeadService method `method` `count` times from driver `driver`, the
// i-th call's arguments written by `args(i, w)` and its result decoded as T:
// at most `rate` calls a second (0: as fast as the head answers, `window` in
// flight). Waits for every answer, up to 2 minutes.
struct CallRun {
  Latencies latency;  // ms
  double seconds = 0;
  int failed = 0;
  std::string first_error;
};

template <class T>
CallRun call_many(SimFleet& fleet, int driver, const std::string& method, int count, int rate,
                  int window, const std::function<void(int, Writer&)>& args) {
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    int in_flight = 0;
    int done = 0;
    CallRun run;
  };
  auto state = std::make_shared<State>();
  absl::Time start = absl::Now();
  for (int i = 0; i < count; ++i) {
    if (rate > 0) {
      absl::Time at = start + absl::Seconds(1) * i / rate;
      if (absl::Now() < at) absl::SleepFor(at - absl::Now());
    }
    {
      std::unique_lock<std::mutex> lock(state->mu);
      if (rate <= 0) state->cv.wait(lock, [&] { return state->in_flight < window; });
      ++state->in_flight;
    }
    Writer w;
    args(i, w);
    absl::Time sent = absl::Now();
    fleet.call_head(
        driver, method, w, [state, sent](absl::StatusOr<std::span<const std::byte>> in) {
          absl::Status s = in.ok() ? decode<T>(*in).status() : in.status();
          std::lock_guard<std::mutex> lock(state->mu);
          state->run.latency.ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - sent));
          if (!s.ok() && state->run.failed++ == 0) {
            state->run.first_error = s.ToString();
          }
          --state->in_flight;
          ++state->done;
          state->cv.notify_all();
        });
  }
  std::unique_lock<std::mutex> lock(state->mu);
  state->cv.wait_for(lock, std::chrono::seconds(120), [&] { return state->done == count; });
  state->run.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  return state->run;
}

// `count` actors of one unit of "sim" each, owned by the driver's job.
CallRun spawn_actors(SimFleet& fleet, int driver, int count, int rate, int window) {
  cluster::SpawnRequest request;
  request.type = "SimActor";
  request.resources = "sim=1";
  request.owner = fleet.node_of(driver);
  return call_many<cluster::ActorLocation>(fleet, driver, "spawn_actor", count, rate, window,
                                           [&](int, Writer& w) { w.write(request); });
}

// `count` placement groups of 4 bundles, PACK and SPREAD in turn.
CallRun create_groups(SimFleet& fleet, int driver, int count, int window) {
  uint32_t owner = fleet.node_of(driver);
  return call_many<uint64_t>(fleet, driver, "create_placement_group", count, 0, window,
                             [&](int i, Writer& w) {
                               w.write(std::vector<std::string>(4, "sim=1"));
                               w.write(std::string(i % 2 == 0 ? "PACK" : "SPREAD"));
                               w.write(std::string());
                               w.write(owner);
                               w.write(false);
                               w.write(std::vector<int32_t>());
                             });
}

absl::StatusOr<ClusterStatus> fetch_status(SimFleet& fleet, int slot) {
  Writer none;
  auto bytes = fleet.call_head_sync(slot, "status", none, absl::Seconds(60));
  if (!bytes.ok()) return bytes.status();
  return decode<ClusterStatus>(*bytes);
}

void actors_and_groups(Bench& b, const Config& config) {
  SimFleet& fleet = *b.fleet;
  pid_t head = b.cluster->head_pid();
  auto driver = fleet.add_driver(absl::Seconds(30));
  if (!driver.ok()) die("adding a driver", driver.status());
  double rss0 = rss_mib(head);
  // Latency at a steady rate.
  int paced = std::min(config.actors / 4, config.actor_rate * 3);
  CallRun at_rate = spawn_actors(fleet, *driver, paced, config.actor_rate, 0);
  double p99 = at_rate.latency.quantile(0.99);
  report(absl::StrCat("actor creation p99 at ", config.actor_rate, "/s"), fmt(p99, " ms"),
         "<= 10 ms", "-", at_rate.failed == 0 && p99 <= 10);
  // Then as fast as the head takes them.
  CallRun fast = spawn_actors(fleet, *driver, config.actors - paced, 0, 1024);
  double rate = (config.actors - paced) / fast.seconds;
  report(absl::StrCat("actors created per second (", config.actors, " in all)"), fmt(rate, "/s"),
         ">= 5000/s",
         absl::StrCat(kRayActorsPerSecond, "/s (",
                      absl::StrFormat("%.1fx", rate / kRayActorsPerSecond), ")"),
         fast.failed == 0 && rate >= 5000);
  if (at_rate.failed + fast.failed > 0) {
    std::printf("  %d actors failed to start: %s\n", at_rate.failed + fast.failed,
                (at_rate.failed ? at_rate.first_error : fast.first_error).c_str());
  }
  double per_actor = (rss_mib(head) - rss0) * 1024 * 1024 / config.actors;
  report("head memory per actor", fmt(per_actor, " B"), "<= 1024 B", "-", per_actor <= 1024);
  // The job ends: its actors go.
  absl::Time end_job = absl::Now();
  if (absl::Status s = fleet.leave(*driver, absl::Seconds(120)); !s.ok()) die("ending the job", s);
  absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (fleet.killed() < static_cast<uint64_t>(config.actors) && absl::Now() < deadline)
    absl::SleepFor(absl::Milliseconds(20));
  std::printf("  the job ended: %llu of %d actors killed in %.2f s\n",
              static_cast<unsigned long long>(fleet.killed()), config.actors,
              absl::ToDoubleSeconds(absl::Now() - end_job));
  // Placement groups.
  auto pg_driver = fleet.add_driver(absl::Seconds(30));
  if (!pg_driver.ok()) die("adding a driver", pg_driver.status());
  CallRun groups = create_groups(fleet, *pg_driver, config.groups, 256);
  double group_rate = config.groups / groups.seconds;
  if (groups.failed > 0)
    std::printf("  %d groups failed: %s\n", groups.failed, groups.first_error.c_str());
  report(absl::StrCat("placement groups of 4 bundles per second (", config.groups, ")"),
         fmt(group_rate, "/s"), ">= 1000/s",
         absl::StrCat(kRayGroupsPerSecond, "/s (",
                      absl::StrFormat("%.0fx", group_rate / kRayGroupsPerSecond), ")"),
         groups.failed == 0 && group_rate >= 1000);
  absl::StatusOr<ClusterStatus> status = fetch_status(fleet, *pg_driver);
  if (!status.ok()) die("fetching the status", status.status());
  int over = 0;
  double reserved = 0;
  int real_alive = 0;
  for (const cluster::NodeStatus& n : status->nodes) {
    if (n.state != cluster::NodeState::kAlive || n.info.kind != cluster::NodeKind::kWorker)
      continue;
    if (!n.info.name.starts_with("sim ")) {
      ++real_alive;
      continue;
    }
    auto total = cluster::Resources::parse(n.info.resources);
    auto available = cluster::Resources::parse(n.available);
    if (!total.ok() || !available.ok()) continue;
    if (available->any_negative()) ++over;
    reserved += total->get("sim") - available->get("sim");
  }
  int placed = 0;
  for (const cluster::PlacementGroupStatus& g : status->placement_groups)
    placed += g.placed ? 1 : 0;
  report("placement groups placed, bundles reserved",
         absl::StrCat(placed, "/", config.groups, ", ", reserved, "/", 4 * config.groups), "all",
         "-", placed == config.groups && reserved == 4.0 * config.groups);
  report("nodes over-committed", absl::StrCat(over), "0", "-", over == 0);
  report("real workers alive at the end", absl::StrCat(real_alive, "/", config.real_workers), "all",
         "-", real_alive == config.real_workers);
}

// The leader killed `kills` times (SIGKILL, at a moment of no particular
// work): the time from its death to the first request a new leader serves,
// asked of every head in turn by a client that knows them all.
void failovers(const Config& config, int kills) {
  cluster::LocalClusterOptions options{
      .workers = 1, .troupe_binary = TROUPE_BINARY, .echo_output = false};
  options.store = absl::StrCat(config.store, "/bench-failover-", ::getpid(), "/");
  options.heads = 2;
  auto local = cluster::LocalCluster::start(options);
  if (!local.ok()) die("cannot start the cluster", local.status());
  auto node = cluster::Node::start({.index = cluster::kUnassignedNode,
                                    .token = read_token((*local)->token_file()),
                                    .name = "failover probe",
                                    .transports = {"tcp"},
                                    .threads = 1,
                                    .connect_timeout = absl::Milliseconds(200)});
  if (!node.ok()) die("starting a client", node.status());
  std::vector<std::string> heads = absl::StrSplit((*local)->head_address(), ',');
  auto head = (*node)->ref<cluster::HeadService>(cluster::head_service_id(), cluster::kHeadNode);
  Latencies took;
  for (int k = 0; k < kills; ++k) {
    const std::string dead = (*local)->leader_address();
    (*local)->kill_head(SIGKILL);
    const absl::Time killed = absl::Now();
    bool served = false;
    for (size_t i = 0; !served && absl::Now() - killed < absl::Seconds(30); ++i) {
      const std::string& h = heads[i % heads.size()];
      if (h == dead) continue;
      (*node)->redirect(cluster::kHeadNode, {"tcp://" + h});
      served = head.call(&cluster::HeadService::kv_get, std::string("probe"))
                   .get(absl::Milliseconds(200))
                   .ok();
      if (!served) absl::SleepFor(absl::Milliseconds(5));
    }
    if (!served) die("failover", absl::DeadlineExceededError("no head served within 30 s"));
    took.ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - killed));
    if (auto s = (*local)->wait_for_new_leader(absl::Seconds(30)); !s.ok())
      die("failover", s.status());
    if (absl::Status s = (*local)->restart_head(); !s.ok()) die("restarting a head", s);
  }
  const double p50 = took.quantile(0.5), p99 = took.quantile(0.99);
  std::printf(
      "  failovers: %d leader kills, first request served by the new leader after "
      "p50 %.0f ms, p99 %.0f ms (lease TTL 2 s)\n",
      kills, p50, p99);
  report(absl::StrCat("failover: leader death to first request served (", kills, " kills)"),
         absl::StrCat(fmt(p50, " ms"), " / ", fmt(p99, " ms")), "p99 <= 3 s",
         "GCS restart: minutes", p99 <= 3000);
}

std::vector<int> parse_sizes(const std::string& text) {
  std::vector<int> out;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    int n = 0;
    if (absl::SimpleAtoi(part, &n) && n > 0) out.push_back(n);
  }
  return out;
}

}  // namespace
}  // namespace troupe::bench

int main(int argc, char** argv) {
  using namespace troupe::bench;
  Flags flags(argc, argv);
  if (flags.has("--help")) {
    std::printf(
        "usage: head_bench [--nodes 2000] [--sizes 250,500,1000] [--steady-seconds 5]\n"
        "                  [--actors 100000] [--actor-rate 1000] [--groups 10000]\n"
        "                  [--crashes 20] [--hangs 20] [--partitions 5] [--stall-seconds 5]\n"
        "                  [--soak-seconds 600] [--real-workers 2]\n"
        "                  [--store etcd [--failovers 30]]\n");
    return 0;
  }
  Config config;
  auto get_int = [&](const char* name, int fallback) {
    return static_cast<int>(flags.get_long(name, fallback));
  };
  auto get_double = [&](const char* name, double fallback) {
    std::string v = flags.get(name, "");
    return v.empty() ? fallback : std::strtod(v.c_str(), nullptr);
  };
  config.nodes = get_int("--nodes", config.nodes);
  if (flags.has("--sizes")) config.sizes = parse_sizes(flags.get("--sizes", ""));
  config.steady_seconds = get_double("--steady-seconds", config.steady_seconds);
  config.actors = get_int("--actors", config.actors);
  config.actor_rate = get_int("--actor-rate", config.actor_rate);
  config.groups = get_int("--groups", config.groups);
  config.crashes = get_int("--crashes", config.crashes);
  config.hangs = get_int("--hangs", config.hangs);
  config.partitions = get_int("--partitions", config.partitions);
  config.stall_seconds = get_double("--stall-seconds", config.stall_seconds);
  config.soak_seconds = get_double("--soak-seconds", config.soak_seconds);
  config.real_workers = get_int("--real-workers", config.real_workers);
  config.failovers = get_int("--failovers", config.failovers);
  std::unique_ptr<troupe::cluster::LocalEtcd> etcd;
  if (flags.has("--store")) {
    if (flags.get("--store", "") != "etcd") {
      std::fprintf(stderr, "head_bench: --store etcd is the one store to choose\n");
      return 2;
    }
    auto started = troupe::cluster::LocalEtcd::start();
    if (absl::IsNotFound(started.status())) {
      std::printf("head_bench: skipped --store etcd: %s\n",
                  std::string(started.status().message()).c_str());
      return 0;
    }
    if (!started.ok()) die("cannot start etcd", started.status());
    etcd = *std::move(started);
    config.store = "etcd://" + etcd->host_port();
  }

  bool pinned = cores_available() >= 2;
  if (pinned) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(1, &set);
    pinned = ::sched_setaffinity(0, sizeof(set), &set) == 0;
  }
  std::printf("head_bench: up to %d simulated nodes (+%d real workers); %s; the head's store: %s\n",
              config.nodes, config.real_workers,
              pinned ? "head on core 0, simulator on core 1" : "not pinned (fewer than 2 cores)",
              config.store.empty() ? "its state directory" : "etcd, with a standby head");
  std::vector<int> sizes;
  for (int s : config.sizes)
    if (s < config.nodes) sizes.push_back(s);
  sizes.push_back(config.nodes);
  std::vector<SizeResult> results;
  for (size_t i = 0; i < sizes.size(); ++i) {
    Bench b = start_bench(config, pinned);
    results.push_back(storm_and_steady(b, sizes[i], config));
    if (i + 1 < sizes.size()) continue;
    const SizeResult& top = results.back();
    report(absl::StrCat("registration storm: ", top.nodes, " nodes in 1 s, all registered"),
           fmt(top.storm_s, " s"), "<= 5 s", "hangs past 2k nodes", top.storm_s <= 5);
    report("head request p99 in the storm", fmt(top.register_p99_ms, " ms"), "<= 100 ms", "-",
           top.register_p99_ms <= 100);
    std::set<int> faulted;
    failures(b, config, faulted);
    actors_and_groups(b, config);
  }
  // The steady-state figures, with the RSS slope over the sizes.
  std::printf("\nsteady heartbeats (head CPU per heartbeat; RSS by cluster size):\n");
  std::printf("%8s %10s %14s %14s %10s\n", "nodes", "storm s", "heartbeats/s", "CPU us each",
              "RSS MiB");
  bool all_valid = true;
  double worst_cpu = 0;
  for (const SizeResult& r : results) {
    std::printf("%8d %10.2f %14.0f %14.2f %10.1f%s\n", r.nodes, r.storm_s, r.heartbeats_per_s,
                r.cpu_us_per_heartbeat, r.rss_mib, r.valid ? "" : "   (discarded)");
    all_valid = all_valid && r.valid;
    if (r.valid) worst_cpu = std::max(worst_cpu, r.cpu_us_per_heartbeat);
  }
  if (results.size() >= 2) {
    const SizeResult& lo = results.front();
    const SizeResult& hi = results.back();
    double slope_kib = (hi.rss_mib - lo.rss_mib) * 1024 / std::max(1, hi.nodes - lo.nodes);
    report("head RSS per node (slope)", fmt(slope_kib, " KiB"), "<= 16 KiB", "-", slope_kib <= 16);
  }
  const SizeResult& top = results.back();
  double budget = 64 + 16.0 * top.nodes / 1024;
  report(absl::StrCat("head RSS at ", top.nodes, " nodes"), fmt(top.rss_mib, " MiB"),
         absl::StrCat("<= ", fmt(budget, " MiB")), "-", top.rss_mib <= budget);
  report(absl::StrCat("head CPU per heartbeat at ", top.nodes, " nodes (worst size ",
                      all_valid ? fmt(worst_cpu, " us") : "discarded", ")"),
         top.valid ? fmt(top.cpu_us_per_heartbeat, " us") : "discarded", "<= 25 us", "-",
         top.valid && top.cpu_us_per_heartbeat <= 25);

  if (!config.store.empty() && config.failovers > 0) failovers(config, config.failovers);

  std::printf("\n%-58s %16s %14s %24s\n", "", "troupe", "goal", "Ray");
  int missed = 0;
  for (const Line& l : lines) {
    std::printf("%-58s %16s %14s %24s  %s\n", l.what.c_str(), l.troupe.c_str(), l.goal.c_str(),
                l.ray.c_str(), l.met ? "" : "MISSED");
    missed += l.met ? 0 : 1;
  }
  std::printf("\n%d of %zu goals met\n", static_cast<int>(lines.size()) - missed, lines.size());
  return 0;
}
