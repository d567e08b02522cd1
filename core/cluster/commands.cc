#include "core/cluster/commands.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/cluster/actor_library.h"
#include "core/cluster/detail/agent.h"
#include "core/cluster/detail/etcd_head.h"
#include "core/cluster/detail/etcd_leadership.h"
#include "core/cluster/detail/head.h"
#include "core/cluster/detail/http_status.h"
#include "core/cluster/detail/launch_process.h"
#include "core/cluster/detail/member.h"
#include "core/cluster/detail/resources.h"
#include "core/cluster/detail/state_dir.h"
#include "core/cluster/flags.h"
#include "core/cluster/gpu_inventory.h"
#include "core/cluster/launch_env.h"
#include "spdlog/spdlog.h"
#include "transport/auth.h"
#include "transport/rdma_inventory.h"

namespace troupe::cluster {
namespace {

std::atomic<int> g_signal{0};

// The most actor threads a node may run (--threads).
constexpr int kMaxThreads = 512;

void on_signal(int sig) {
  g_signal.store(sig);
}

// SIGINT and SIGTERM end the command in order instead of killing it.
void catch_signals() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

int fail(const absl::Status& s) {
  std::fprintf(stderr, "troupe: %s\n", printable(s.message()).c_str());
  return 1;
}

int usage(const absl::Status& s) {
  std::fprintf(stderr, "%s\n", printable(s.message()).c_str());
  return 2;
}

std::string state_file(const std::string& dir, const char* name) {
  return dir + "/" + name;
}

absl::StatusOr<absl::Duration> parse_seconds(const std::string& flag, const std::string& text) {
  absl::Duration d;
  if (absl::ParseDuration(text, &d) && d > absl::ZeroDuration()) return d;
  double s = 0;
  if (absl::SimpleAtod(text, &s) && s > 0) return absl::Seconds(s);
  return absl::InvalidArgumentError(
      absl::StrCat("--", flag, " ", text, ": expected a duration such as 1s, 500ms or 2.5"));
}

absl::StatusOr<uint16_t> parse_port(const std::string& flag, const std::string& text) {
  int port = -1;
  if (!absl::SimpleAtoi(text, &port) || port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, " ", text, ": expected 0-65535"));
  }
  return static_cast<uint16_t>(port);
}

absl::StatusOr<std::string> resolve_head(const Flags& flags) {
  return find_head_address(flags.get("head"));
}

absl::StatusOr<std::string> resolve_token(const Flags& flags) {
  return find_cluster_token(flags.get("token-file"));
}

// A connection to the head for one-off questions, without joining the cluster.
struct HeadClient {
  std::unique_ptr<Node> node;
  ActorRef<HeadService> head;
};

absl::StatusOr<HeadClient> head_client(const Flags& flags) {
  absl::StatusOr<std::string> address = resolve_head(flags);
  if (!address.ok()) return address.status();
  absl::StatusOr<std::string> token = resolve_token(flags);
  if (!token.ok()) return token.status();
  auto node = Node::start({.index = kUnassignedNode,
                           .token = *token,
                           .name = "troupe cli",
                           .transports = {"tcp"},
                           .threads = 1,
                           .connect_timeout = absl::Seconds(5)});
  if (!node.ok()) return node.status();
  HeadClient c;
  c.node = *std::move(node);
  // With standby heads, the one that answers leads (standbys do not listen);
  // given their etcd, the one it names.
  std::vector<std::string> heads;
  if (is_etcd_url(*address)) {
    absl::StatusOr<std::string> leader = etcd_leader_address(*address);
    if (!leader.ok()) return leader.status();
    heads.push_back(*leader);
  } else {
    heads = absl::StrSplit(*address, ',', absl::SkipWhitespace());
  }
  if (heads.empty()) return absl::InvalidArgumentError("--head: no address");
  for (size_t i = 0; i < heads.size(); ++i) {
    c.node->redirect(kHeadNode, {"tcp://" + heads[i]});
    if (heads.size() == 1 || c.node->connect(kHeadNode).ok()) break;
  }
  c.head = c.node->ref<HeadService>(head_service_id(), kHeadNode);
  return c;
}

absl::Status explain_head_error(const absl::Status& s, const Flags& flags) {
  std::string where = resolve_head(flags).value_or("?");
  if (absl::IsPermissionDenied(s)) {
    return absl::PermissionDeniedError(
        absl::StrCat("the head at ", where, " refused our cluster token; pass --token-file with ",
                     "the head's token file (", kDefaultStateDir, "/token by default)"));
  }
  return absl::Status(s.code(),
                      absl::StrCat("cannot reach the head at ", where, ": ", head_error_text(s)));
}

// The cluster as the head sees it; errors said as explain_head_error says them.
absl::StatusOr<ClusterStatus> fetch_status(const HeadClient& client, const Flags& flags) {
  absl::StatusOr<ClusterStatus> status =
      client.head.call(&HeadService::status).get(absl::Seconds(10));
  if (!status.ok()) return explain_head_error(status.status(), flags);
  return status;
}

// What a worker offers by default: every core, the machine's memory, its
// GPUs and its RDMA NICs' active ports from the node inventories (no RDMA:
// no RDMA entry).
std::string default_resources(const transport::RdmaInventory& rdma, const GpuInventory& gpus) {
  long cores = ::sysconf(_SC_NPROCESSORS_ONLN);
  long pages = ::sysconf(_SC_PHYS_PAGES);
  long page = ::sysconf(_SC_PAGE_SIZE);
  Resources r;
  r.set(kCpu, static_cast<double>(cores > 0 ? cores : 1));
  r.set(kGpu, static_cast<double>(gpus.devices.size()));
  if (pages > 0 && page > 0) r.set(kMemory, static_cast<double>(pages) * static_cast<double>(page));
  if (int ports = transport::active_ports(rdma); ports > 0) r.set(kRdma, ports);
  return r.to_string();
}

// "devices 2-3" / "device 2": indices from..to.
std::string device_range(size_t from, size_t to) {
  return from == to ? absl::StrCat("device ", from) : absl::StrCat("devices ", from, "-", to);
}

// What a worker offering GPU=`offered` should be told of the GPUs it found,
// when they differ; empty when they agree.
std::string gpu_offer_note(int offered, const GpuInventory& gpus) {
  const size_t found = gpus.devices.size();
  const size_t n = static_cast<size_t>(offered);
  if (n > found) {
    return absl::StrCat(
        "--resources offers GPU=", offered, " but ",
        found == 0 ? absl::StrCat("no GPUs were found (", gpus.note, ")")
                   : absl::StrCat(found, found == 1 ? " GPU was" : " GPUs were", " found"),
        ": ", device_range(found, n - 1), n - found == 1 ? " is a stand-in" : " are stand-ins",
        " named \"GPU\" of unknown memory");
  }
  if (n < found) {
    return n == 0 ? absl::StrCat("--resources offers none of the ", found,
                                 " GPUs found (add GPU=", found, " to offer them)")
                  : absl::StrCat("--resources offers GPU=", offered, " of the ", found,
                                 " GPUs found: actors get ", device_range(0, n - 1));
  }
  return "";
}

// How long a worker declared dead gives its actors to return before it
// exits without them: one hung in its work (the reason it was fenced) never
// returns, and the node must not linger as a process nobody calls.
constexpr absl::Duration kDeadNodeExitGrace = absl::Seconds(10);

// Exits the process unless dismissed within kDeadNodeExitGrace.
class ExitUnlessDismissed {
 public:
  explicit ExitUnlessDismissed(uint32_t node) {
    std::thread([node, dismissed = dismissed_] {
      const absl::Time until = absl::Now() + kDeadNodeExitGrace;
      while (absl::Now() < until) {
        if (dismissed->load()) return;
        absl::SleepFor(absl::Milliseconds(50));
      }
      std::printf(
          "troupe worker: node %u: its actors did not return within %s of the node being "
          "declared dead (one is hung in its work); exiting\n",
          node, absl::FormatDuration(kDeadNodeExitGrace).c_str());
      std::fflush(stdout);
      ::_exit(1);
    }).detach();
  }
  ~ExitUnlessDismissed() { dismissed_->store(true); }

 private:
  std::shared_ptr<std::atomic<bool>> dismissed_ = std::make_shared<std::atomic<bool>>(false);
};

// Waits until `stopped()` says why, or a signal arrives.
template <class F>
std::string wait_for_end(F stopped) {
  while (true) {
    if (int sig = g_signal.load(); sig != 0) return absl::StrCat("signal ", strsignal(sig));
    if (std::optional<std::string> why = stopped(absl::Milliseconds(100))) return *why;
  }
}

}  // namespace

int head_command(const std::vector<std::string>& args) {
  auto flags =
      Flags::parse("head", args,
                   {"port", "host", "state-dir", "http-port", "http-host", "heartbeat-timeout",
                    "heartbeat-interval", "threads", "token-file", "store", "lease-ttl"});
  if (!flags.ok()) return usage(flags.status());
  if (flags->help()) {
    std::printf(
        "usage: troupe head [--port 6380] [--host 127.0.0.1] [--state-dir %s]\n"
        "                   [--heartbeat-timeout 1s] [--heartbeat-interval 100ms]\n"
        "                   [--http-port 8265] [--http-host 127.0.0.1]\n"
        "                   [--store etcd://HOST:PORT,... [--lease-ttl 2s]]\n\n"
        "Starts the head of a cluster (as `ray start --head`): the control plane workers\n"
        "and drivers connect to. Writes a fresh cluster token to STATE_DIR/token (mode\n"
        "0600) and the head's address to STATE_DIR/head_address, then runs until\n"
        "`troupe stop` or Ctrl-C. A head started again on the same state directory\n"
        "(after a crash, or Ctrl-C) keeps the token, and the workers still running\n"
        "rejoin it with their actors. STATE_DIR must be this user's and writable by\n"
        "nobody else.\n\n"
        "  --port               control port (0: any free port)\n"
        "  --host               address to listen on (0.0.0.0: every interface)\n"
        "  --state-dir          where the token and address files go\n"
        "  --heartbeat-timeout  declare a node dead after this long without a heartbeat\n"
        "  --http-port          the dashboard at /, the status as text at /status and\n"
        "                       Prometheus metrics at /metrics\n"
        "                       (0: any free port)\n"
        "  --http-host          address the HTTP status listens on: loopback unless given\n"
        "                       (it answers without the cluster token: docs/security.md)\n"
        "  --token-file         use this cluster token (default: $TROUPE_TOKEN, else the\n"
        "                       state directory's (with --store, etcd's), else a fresh one)\n"
        "  --store              keep the head's decisions in etcd "
        "(etcd://HOST:PORT,...[/PREFIX/])\n"
        "                       and run standby heads: start several on the same store;\n"
        "                       one leads, the others stand by and take over when it is\n"
        "                       lost. Give workers and drivers every head's address,\n"
        "                       comma-separated (docs/fault_tolerance.md)\n"
        "  --lease-ttl          with --store: how long a lost leader keeps the lead\n\n"
        "Under Slurm, torchrun/Kubeflow or a JobSet the port (and 0.0.0.0 as the host)\n"
        "come from the launch environment unless given (docs/cluster.md, \"Launching\").\n",
        kDefaultStateDir);
    return 0;
  }
  absl::StatusOr<std::optional<LaunchEnv>> launched = detect_launch_env();
  if (!launched.ok()) return usage(launched.status());
  raise_open_file_limit();
  absl::StatusOr<uint16_t> port = parse_port(
      "port", flags->get("port", *launched ? absl::StrCat((*launched)->head_port) : "6380"));
  if (!port.ok()) return usage(port.status());
  HeadOptions options;
  options.port = *port;
  // Launched on many machines, the others must reach it.
  options.host = flags->get("host", *launched ? "0.0.0.0" : "127.0.0.1");
  if (flags->has("heartbeat-timeout")) {
    auto d = parse_seconds("heartbeat-timeout", flags->get("heartbeat-timeout"));
    if (!d.ok()) return usage(d.status());
    options.config.heartbeat_timeout = *d;
  }
  if (flags->has("heartbeat-interval")) {
    auto d = parse_seconds("heartbeat-interval", flags->get("heartbeat-interval"));
    if (!d.ok()) return usage(d.status());
    options.config.heartbeat_interval = *d;
  }
  if (options.config.heartbeat_interval >= options.config.heartbeat_timeout) {
    return usage(absl::InvalidArgumentError(absl::StrCat(
        "--heartbeat-interval ", absl::FormatDuration(options.config.heartbeat_interval),
        " must be shorter than --heartbeat-timeout ",
        absl::FormatDuration(options.config.heartbeat_timeout),
        " (else every node is declared dead between two heartbeats)")));
  }
  absl::StatusOr<uint16_t> http_port = parse_port("http-port", flags->get("http-port", "8265"));
  if (!http_port.ok()) return usage(http_port.status());
  std::string dir = flags->get("state-dir", kDefaultStateDir);
  if (absl::Status s = prepare_state_dir(dir); !s.ok()) return fail(s);
  // With etcd: the store, and the lead to win before serving.
  std::optional<EtcdStoreUrl> etcd_url;
  std::optional<EtcdClient> etcd;
  absl::Duration lease_ttl = absl::Seconds(2);
  if (flags->has("store")) {
    absl::StatusOr<EtcdStoreUrl> url = parse_etcd_store_url(flags->get("store"));
    if (!url.ok()) return usage(url.status());
    if (*port == 0) {
      return usage(absl::InvalidArgumentError(
          "--store needs a fixed --port: workers and drivers are given every head's address"));
    }
    if (flags->has("lease-ttl")) {
      auto d = parse_seconds("lease-ttl", flags->get("lease-ttl"));
      if (!d.ok()) return usage(d.status());
      lease_ttl = *d;
    }
    absl::StatusOr<EtcdClient> client = EtcdClient::connect(url->endpoints);
    if (!client.ok()) return usage(client.status());
    etcd_url = *std::move(url);
    etcd = *std::move(client);
  }
  bool fresh_token = true;
  bool given_token = false;
  absl::StatusOr<std::string> token = absl::UnknownError("no token");
  if (etcd) {
    std::string given;
    if (flags->has("token-file") || std::getenv("TROUPE_TOKEN") != nullptr) {
      absl::StatusOr<std::string> t = transport::resolve_token(flags->get("token-file"));
      if (!t.ok()) return fail(t.status());
      given = *t;
      given_token = true;
    }
    token = etcd_cluster_token(*etcd, *etcd_url, given);
    if (!token.ok()) return fail(token.status());
    if (absl::Status s = write_state_file(dir, "token", *token + "\n"); !s.ok()) return fail(s);
    fresh_token = false;
  } else if (flags->has("token-file") || std::getenv("TROUPE_TOKEN") != nullptr) {
    // Given (a cluster manager's secret): the workers have it already. Kept
    // in the state directory too, for the commands run on this machine.
    token = transport::resolve_token(flags->get("token-file"));
    if (!token.ok()) return fail(token.status());
    if (absl::Status s = write_state_file(dir, "token", *token + "\n"); !s.ok()) return fail(s);
    fresh_token = false;
    given_token = true;
  } else {
    token = load_or_create_token(dir, &fresh_token);
  }
  if (!token.ok()) return fail(token.status());
  if (*launched) {
    std::printf("troupe head: launched by %s\n", (*launched)->describe().c_str());
  }
  options.token = *token;
  options.state_dir = dir;
  std::string token_file = state_file(dir, "token");
  catch_signals();
  std::unique_ptr<EtcdLeadership> leadership;
  auto store_failed = std::make_shared<std::atomic<bool>>(false);
  if (etcd) {
    const std::string me = advertised_head_address(options.host, *port);
    leadership = std::make_unique<EtcdLeadership>(
        *etcd, LeadershipOptions{.key = etcd_url->leader_key(), .name = me, .ttl = lease_ttl});
    if (!stand_by_until_leading(*leadership, me, [] { return g_signal.load() != 0; })) {
      return 0;  // stopped while standing by
    }
    options.store =
        std::shared_ptr<HeadStore>(etcd_store(*etcd, leadership.get(), etcd_url->records_prefix()));
    options.on_store_failure = [store_failed](absl::Status) { store_failed->store(true); };
  }
  auto server = HeadServer::start(options);
  if (!server.ok()) return fail(server.status());
  std::string address = (*server)->address().substr(6);  // "tcp://h:p" -> "h:p"
  ActorRef<HeadService> service = (*server)->service();
  const std::string http_host = flags->get("http-host", "127.0.0.1");
  auto http = HttpStatusServer::start(
      http_host, *http_port,
      {.status = [service]() { return service.call(&HeadService::status).get(absl::Seconds(5)); },
       .job_metrics =
           [service](uint32_t job) {
             return service.call(&HeadService::job_metrics, job).get(absl::Seconds(5));
           }});
  std::string http_line;
  if (http.ok()) {
    const std::string url = absl::StrCat("http://", http_host, ":", (*http)->port(), "/");
    http_line = absl::StrCat("  status over HTTP: ", url,
                             " (the dashboard; text at /status, Prometheus at /metrics)\n");
    // For drivers to show where their job can be watched.
    if (absl::StatusOr<bool> put =
            service.call(&HeadService::kv_put, std::string(kHttpUrlKey), url, true)
                .get(absl::Seconds(5));
        !put.ok()) {
      return fail(put.status());
    }
  } else if (flags->has("http-port")) {
    return fail(http.status());
  } else {
    http_line = absl::StrCat("  (no HTTP status: ", http.status().message(), ")\n");
  }
  if (absl::Status s = write_state_file(dir, "head_address", address + "\n"); !s.ok()) {
    return fail(s);
  }
  std::printf(
      "troupe head listening on %s\n"
      "  token: %s%s\n"
      "  join a worker:  troupe worker --head %s --token-file %s\n"
      "  see the cluster: troupe status --head %s --token-file %s\n%s",
      address.c_str(), token_file.c_str(),
      given_token   ? " (given)"
      : fresh_token ? ""
                    : " (kept from an earlier head: its workers rejoin this one)",
      address.c_str(), token_file.c_str(), address.c_str(), token_file.c_str(), http_line.c_str());
  std::fflush(stdout);
  HeadServer* s = server->get();
  bool cluster_stopped = false;
  bool lost_lead = false;
  std::string why = wait_for_end([&](absl::Duration d) -> std::optional<std::string> {
    if (leadership && (!leadership->leading() || store_failed->load())) {
      // Deposed (its lease lapsed: it was paused, or cut off from etcd):
      // another head leads, and this one can no longer write.
      lost_lead = true;
      return std::string("it no longer leads: another head took over");
    }
    if (!s->wait_stopped(d)) return std::nullopt;
    cluster_stopped = true;
    return std::string("troupe stop");
  });
  std::printf("troupe head: stopping (%s)\n", why.c_str());
  std::fflush(stdout);
  if (http.ok()) http->reset();
  server->reset();
  remove_state_file(dir, "head_address");
  if (cluster_stopped) {
    // The workers were told to exit: the next head starts a new cluster. A
    // head stopped otherwise keeps them, for a head restarted here to take
    // them back.
    remove_state_file(dir, "token");
    remove_state_file(dir, "head_ids");
    if (leadership) {
      // The records go (a head that leads next starts an empty cluster);
      // the token stays, for the standbys that still hold it.
      absl::Status cleared =
          leadership->write({EtcdOp::delete_prefix(etcd_url->records_prefix())}).status();
      if (!cleared.ok()) {
        spdlog::warn("troupe head: cannot clear its records in etcd: {}", cleared.ToString());
      }
    }
  }
  // (A leader that stops resigns here, so that a standby takes over at once.)
  leadership.reset();
  return lost_lead ? kExitHeadLost : 0;
}

int worker_command(const std::vector<std::string>& args) {
  auto flags =
      Flags::parse("worker", args,
                   {"head", "resources", "token-file", "actor-lib", "actor-lib-dir", "host",
                    "threads", "transports", "name", "head-timeout", "restart-wait"});
  if (!flags.ok()) return usage(flags.status());
  if (flags->help()) {
    std::printf(
        "usage: troupe worker --head HOST:PORT [--resources CPU=2,GPU=1,memory=8G,custom=N]\n"
        "                     [--token-file PATH] [--actor-lib PATH]... [--actor-lib-dir DIR]...\n"
        "                     [--host ADDRESS] [--threads N] [--transports ucx,tcp]\n\n"
        "Joins this machine to a cluster as a worker node (as `ray start --address`):\n"
        "it hosts actors the head places here and talks to other nodes directly.\n\n"
        "  --head           the head's control address (default: $TROUPE_HEAD, or the\n"
        "                   head running on this machine); with standby heads\n"
        "                   (`troupe head --store`), every head's, comma-separated,\n"
        "                   or their etcd (etcd://HOST:PORT[/PREFIX/])\n"
        "  --resources      what this node offers (default: every core, all memory,\n"
        "                   GPU=<the NVIDIA GPUs NVML shows, after CUDA_VISIBLE_DEVICES>,\n"
        "                   RDMA=<active RDMA ports> where it has RDMA NICs). GPU=N offers\n"
        "                   devices 0..N-1 (as Ray's --num-gpus); without GPU, none\n"
        "  --token-file     the cluster token (default: $TROUPE_TOKEN, or the local head's)\n"
        "  --actor-lib      a user actor library to load (must lie in an --actor-lib-dir\n"
        "                   or a directory of $TROUPE_ACTOR_LIB_DIRS)\n"
        "  --host           the address other nodes reach this one at (default: the\n"
        "                   local address of the route to the head)\n"
        "  --threads        actor threads, 1-%d (default: one per core)\n"
        "  --head-timeout   how long to keep serving while the head is unreachable,\n"
        "                   rejoining it when it is back (default 60s)\n"
        "  --restart-wait   how long a call from this worker's actors to an actor being\n"
        "                   restarted waits for it before failing (default 30s)\n\n"
        "An actor spawned with GPU=k is given k devices of this node's (a fraction: a\n"
        "share of one), which troupe::cluster::gpu_ids() tells it (core/cluster/gpus.h).\n"
        "A worker the head declares dead (missed heartbeats) joins again as a new node.\n",
        kMaxThreads);
    return 0;
  }
  raise_open_file_limit();
  absl::StatusOr<std::string> head = resolve_head(*flags);
  if (!head.ok()) return usage(head.status());
  const transport::RdmaInventory rdma = transport::rdma_inventory();
  if (!rdma.devices.empty()) {
    std::printf("troupe worker: RDMA NICs: %s\n", transport::describe(rdma).c_str());
  }
  const GpuInventory gpus = gpu_inventory();
  if (!gpus.devices.empty()) std::printf("troupe worker: GPUs: %s\n", describe(gpus).c_str());
  std::string resources_text = flags->get("resources", default_resources(rdma, gpus));
  absl::StatusOr<Resources> resources = Resources::parse(resources_text);
  if (!resources.ok()) {
    return usage(absl::InvalidArgumentError(
        absl::StrCat("--resources ", resources_text, ": ", resources.status().message())));
  }
  const double offered = resources->get(kGpu);
  if (offered != std::floor(offered) || offered > kMaxNodeGpus) {
    return usage(absl::InvalidArgumentError(absl::StrCat(
        "--resources ", resources_text, ": GPU=", offered, " is not a whole number of GPUs up to ",
        kMaxNodeGpus, " (as Ray's --num-gpus)")));
  }
  if (const std::string note = gpu_offer_note(static_cast<int>(offered), gpus); !note.empty()) {
    std::printf("troupe worker: %s\n", note.c_str());
  }
  int threads = 0;
  if (flags->has("threads") && (!absl::SimpleAtoi(flags->get("threads"), &threads) || threads < 1 ||
                                threads > kMaxThreads)) {
    return usage(absl::InvalidArgumentError(
        absl::StrCat("--threads ", flags->get("threads"), ": expected 1-", kMaxThreads)));
  }
  absl::StatusOr<std::optional<LaunchEnv>> launched = detect_launch_env();
  if (!launched.ok()) return usage(launched.status());
  if (*launched && !flags->has("token-file") && std::getenv("TROUPE_TOKEN") == nullptr) {
    return usage(absl::InvalidArgumentError(absl::StrCat(
        "launched by ", (*launched)->manager,
        ": give every rank the same cluster token in TROUPE_TOKEN (64 hex digits, e.g. "
        "`export TROUPE_TOKEN=$(openssl rand -hex 32)` before srun) or --token-file")));
  }
  absl::StatusOr<std::string> token = resolve_token(*flags);
  if (!token.ok()) return fail(token.status());
  // Rank 0 of a launch brings up the head the others join (unless one is named).
  std::optional<HeadChild> head_child;
  const char* named_head = std::getenv("TROUPE_HEAD");
  if (*launched && (*launched)->runs_head() && !flags->has("head") &&
      (named_head == nullptr || *named_head == '\0')) {
    std::printf("troupe worker: %s: starting the head\n", (*launched)->describe().c_str());
    std::fflush(stdout);
    absl::StatusOr<pid_t> pid = start_head_process(**launched);
    if (!pid.ok()) return fail(pid.status());
    head_child.emplace(*pid);
  } else if (*launched) {
    std::printf("troupe worker: %s\n", (*launched)->describe().c_str());
    std::fflush(stdout);
  }
  std::vector<std::string> dirs = flags->all("actor-lib-dir");
  for (std::string& d : actor_library_dirs_from_env())
    dirs.push_back(std::move(d));
  for (const std::string& lib : flags->all("actor-lib")) {
    auto types = load_actor_library(lib, dirs);
    if (!types.ok()) return fail(types.status());
    std::printf("troupe worker: loaded %s (%s)\n", lib.c_str(),
                absl::StrJoin(*types, ", ").c_str());
  }
  std::vector<std::string> transports =
      absl::StrSplit(flags->get("transports", "ucx,tcp"), ',', absl::SkipEmpty());
  catch_signals();
  MemberOptions member_options{.head = *head,
                               .token = *token,
                               .kind = NodeKind::kWorker,
                               .name = flags->get("name"),
                               .resources = resources->to_string(),
                               .gpus = gpus.devices,
                               .host = flags->get("host"),
                               .transports = transports,
                               .threads = threads};
  if (flags->has("head-timeout")) {
    auto d = parse_seconds("head-timeout", flags->get("head-timeout"));
    if (!d.ok()) return usage(d.status());
    member_options.head_grace = *d;
  }
  if (flags->has("restart-wait")) {
    auto d = parse_seconds("restart-wait", flags->get("restart-wait"));
    if (!d.ok()) return usage(d.status());
    member_options.restart_wait = *d;
  }
  // A node the head declared dead (it missed heartbeats in a slow moment)
  // has lost its actors to restarts elsewhere: it joins again as a new node.
  for (int joins = 0;; ++joins) {
    // Launched together, a rank may start before the head listens; given
    // standby heads, it may come while one takes over: it waits up to
    // --head-timeout.
    const bool standbys = head->find(',') != std::string::npos || is_etcd_url(*head);
    auto member = Member::join_when_head_up(
        member_options, *launched || standbys ? member_options.head_grace : absl::ZeroDuration(),
        [&](const absl::Status& why) {
          std::printf("troupe worker: waiting for the head at %s (%s)\n", head->c_str(),
                      std::string(why.message()).c_str());
          std::fflush(stdout);
        },
        [] { return g_signal.load() != 0; });
    if (!member.ok()) return fail(member.status());
    Member& m = **member;
    auto agent = m.node().system().spawn_at<NodeAgent>(node_agent_id(m.index()), {.name = "agent"},
                                                       &m.node(), m.stop_signal(), m.hosted());
    if (!agent.ok()) return fail(agent.status());
    if (absl::Status s = m.ready(); !s.ok()) return fail(s);
    std::printf("troupe worker: node %u %s the cluster at %s [%s], listening on %s\n", m.index(),
                joins == 0 ? "joined" : "joined again", head->c_str(),
                resources->to_string().c_str(), absl::StrJoin(m.node().endpoints(), ", ").c_str());
    std::fflush(stdout);
    std::string why = wait_for_end([&m](absl::Duration d) { return m.wait_stopped(d); });
    bool again = g_signal.load() == 0 && m.stop_signal()->declared_dead.load();
    std::printf("troupe worker: node %u stopping (%s)%s\n", m.index(), why.c_str(),
                again ? "; joining again as a new node" : "");
    std::fflush(stdout);
    const bool head_lost = m.stop_signal()->head_lost.load();
    {
      std::optional<ExitUnlessDismissed> watchdog;
      if (m.stop_signal()->declared_dead.load()) watchdog.emplace(m.index());
      member->reset();
    }
    if (!again) return head_lost ? kExitHeadLost : kExitOk;
  }
}

namespace {}  // namespace

int status_command(const std::vector<std::string>& args) {
  auto flags = Flags::parse("status", args, {"head", "token-file"});
  if (!flags.ok()) return usage(flags.status());
  if (flags->help()) {
    std::printf(
        "usage: troupe status [--head HOST:PORT] [--token-file PATH]\n\n"
        "Shows the cluster (as `ray status`): nodes with their state and resources in use,\n"
        "actors by state, placement groups, connected drivers and recent events.\n");
    return 0;
  }
  auto client = head_client(*flags);
  if (!client.ok()) return fail(client.status());
  absl::StatusOr<ClusterStatus> status = fetch_status(*client, *flags);
  if (!status.ok()) return fail(status.status());
  std::fputs(render_status(*status).c_str(), stdout);
  return 0;
}

namespace {

// Splits off the leading arguments that are not flags: `troupe kill NAME --head ...`.
std::vector<std::string> take_positional(std::vector<std::string>& args) {
  std::vector<std::string> positional;
  while (!args.empty() && !args.front().starts_with("-")) {
    positional.push_back(args.front());
    args.erase(args.begin());
  }
  return positional;
}

// The actor `which` names - an id as status shows it ("actor-65534-3") or a
// name - among those `s` lists; a live one before a dead one of that name.
absl::StatusOr<ActorStatus> find_actor_in(const ClusterStatus& s, const std::string& which) {
  const ActorStatus* found = nullptr;
  for (const ActorStatus& a : s.actors) {
    if (to_string(ActorId{a.id}) != which && a.name != which) continue;
    if (found == nullptr || (found->state == ActorState::kDead && a.state != ActorState::kDead)) {
      found = &a;
    }
  }
  if (found == nullptr) {
    return absl::NotFoundError(absl::StrCat("no actor named or with the id '", printable(which),
                                            "' (see `troupe status`)"));
  }
  return *found;
}

absl::StatusOr<PlacementGroupStatus> find_group_in(const ClusterStatus& s,
                                                   const std::string& which) {
  for (const PlacementGroupStatus& g : s.placement_groups) {
    if (g.name == which || absl::StrCat("pg-", g.id) == which || absl::StrCat(g.id) == which) {
      return g;
    }
  }
  return absl::NotFoundError(absl::StrCat("no placement group named or with the id '",
                                          printable(which), "' (see `troupe status`)"));
}

}  // namespace

int kill_command(const std::vector<std::string>& given) {
  std::vector<std::string> args = given;
  std::vector<std::string> positional = take_positional(args);
  auto flags = Flags::parse("kill", args, {"head", "token-file", "restart"}, {"restart"});
  if (!flags.ok()) return usage(flags.status());
  if (flags->help() || positional.size() != 1) {
    std::printf(
        "usage: troupe kill ACTOR [--restart] [--head HOST:PORT] [--token-file PATH]\n\n"
        "Kills an actor (as ray.kill), named by its name or its id as `troupe status` shows\n"
        "it: its pending and later calls fail with ActorDied. With --restart it fails as if\n"
        "it had crashed, and is restarted if its max_restarts allows (no_restart=False).\n");
    return flags->help() ? 0 : 2;
  }
  auto client = head_client(*flags);
  if (!client.ok()) return fail(client.status());
  absl::StatusOr<ClusterStatus> status = fetch_status(*client, *flags);
  if (!status.ok()) return fail(status.status());
  absl::StatusOr<ActorStatus> actor = find_actor_in(*status, positional[0]);
  if (!actor.ok()) return fail(actor.status());
  if (actor->state == ActorState::kDead) {
    std::printf("troupe kill: %s (%s) is already dead: %s\n", to_string(ActorId{actor->id}).c_str(),
                actor->type.c_str(), actor->death_reason.c_str());
    return 0;
  }
  bool restart = flags->has("restart");
  absl::Status s =
      client->head.call(&HeadService::kill_actor, actor->id, !restart).get(absl::Seconds(10));
  if (!s.ok()) return fail(explain_head_error(s, *flags));
  std::printf("troupe kill: %s %s (%s%s)\n", restart ? "restarting" : "killed",
              to_string(ActorId{actor->id}).c_str(), actor->type.c_str(),
              actor->name.empty() ? "" : (" '" + actor->name + "'").c_str());
  return 0;
}

int pg_command(const std::vector<std::string>& given) {
  std::vector<std::string> args = given;
  std::vector<std::string> positional = take_positional(args);
  auto flags = Flags::parse("pg", args, {"head", "token-file"});
  if (!flags.ok()) return usage(flags.status());
  bool remove = positional.size() == 2 && positional[0] == "remove";
  bool list = positional.size() == 1 && positional[0] == "list";
  if (flags->help() || (!remove && !list)) {
    std::printf(
        "usage: troupe pg list [--head HOST:PORT] [--token-file PATH]\n"
        "       troupe pg remove GROUP [--head HOST:PORT] [--token-file PATH]\n\n"
        "Lists placement groups, or removes one named by its name or its id (pg-3, or 3)\n"
        "as ray.util.remove_placement_group does: the actors in it are killed and its\n"
        "resources freed.\n");
    return flags->help() ? 0 : 2;
  }
  auto client = head_client(*flags);
  if (!client.ok()) return fail(client.status());
  absl::StatusOr<ClusterStatus> status = fetch_status(*client, *flags);
  if (!status.ok()) return fail(status.status());
  if (list) {
    for (const PlacementGroupStatus& g : status->placement_groups) {
      std::printf("pg-%llu %s %s %s [%s] %s\n", static_cast<unsigned long long>(g.id),
                  g.name.empty() ? "-" : g.name.c_str(), g.strategy.c_str(),
                  g.placed ? "PLACED" : "PENDING", absl::StrJoin(g.bundles, "; ").c_str(),
                  g.job == 0 ? "detached" : absl::StrCat("job ", g.job).c_str());
    }
    return 0;
  }
  absl::StatusOr<PlacementGroupStatus> group = find_group_in(*status, positional[1]);
  if (!group.ok()) return fail(group.status());
  absl::Status s =
      client->head.call(&HeadService::remove_placement_group, group->id).get(absl::Seconds(10));
  if (!s.ok()) return fail(explain_head_error(s, *flags));
  std::printf("troupe pg remove: removed pg-%llu%s\n", static_cast<unsigned long long>(group->id),
              group->name.empty() ? "" : (" '" + group->name + "'").c_str());
  return 0;
}

namespace {

const NodeStatus* find_node_in(const ClusterStatus& s, uint32_t index) {
  for (const NodeStatus& n : s.nodes) {
    if (n.info.index == index) return &n;
  }
  return nullptr;
}

// What still runs on `node`, by job, for people: "3 actors of job 5".
std::string actors_on(const ClusterStatus& s, uint32_t node) {
  std::map<uint32_t, int> by_job;
  for (const ActorStatus& a : s.actors) {
    if (a.node == node && a.state != ActorState::kDead) ++by_job[a.job];
  }
  std::vector<std::string> parts;
  for (const auto& [job, n] : by_job) {
    parts.push_back(
        absl::StrCat(n, n == 1 ? " actor" : " actors", " of ",
                     job == 0 ? std::string("no job (detached)") : absl::StrCat("job ", job)));
  }
  return absl::StrJoin(parts, ", ");
}

}  // namespace

int drain_command(const std::vector<std::string>& given) {
  std::vector<std::string> args = given;
  std::vector<std::string> positional = take_positional(args);
  auto flags = Flags::parse("drain", args, {"head", "token-file", "cancel", "timeout", "reason"},
                            {"cancel"});
  if (!flags.ok()) return usage(flags.status());
  uint32_t node = 0;
  // What is wrong with the arguments, said before the usage.
  std::string wrong;
  if (flags->help()) {
    // (Asked for: the usage alone.)
  } else if (positional.empty()) {
    wrong = "NODE is missing";
  } else if (positional.size() > 1) {
    wrong = absl::StrCat("one NODE at a time, not ", positional.size(), " ('",
                         printable(absl::StrJoin(positional, "' '")), "')");
  } else if (!absl::SimpleAtoi(positional[0], &node)) {
    wrong = absl::StrCat("'", printable(positional[0]),
                         "' is not a node index: NODE is a number, the one in the NODE column "
                         "of `troupe status`, not a name");
  }
  if (flags->help() || !wrong.empty()) {
    if (!wrong.empty()) std::fprintf(stderr, "troupe drain: %s\n\n", wrong.c_str());
    std::fprintf(
        flags->help() ? stdout : stderr,
        "usage: troupe drain NODE [--timeout SECONDS] [--reason TEXT] [--cancel]\n"
        "                    [--head HOST:PORT] [--token-file PATH]\n\n"
        "Drains worker NODE (its index, as `troupe status` shows it), as kubectl drain does:\n"
        "it takes no new actors or placement-group bundles, and every job with\n"
        "elasticity enabled leaves it at its next step boundary, going on at a smaller dp\n"
        "with the same global batch (docs/elasticity.md). Waits until the node hosts no\n"
        "actors (up to --timeout, default 300 s; 0: do not wait), naming what is left; the\n"
        "worker then can be stopped. --cancel lets the node take new work again.\n");
    return flags->help() ? 0 : 2;
  }
  absl::Duration timeout = absl::Seconds(300);
  double zero = -1;
  if (flags->has("timeout") && absl::SimpleAtod(flags->get("timeout"), &zero) && zero == 0) {
    timeout = absl::ZeroDuration();
  } else if (flags->has("timeout")) {
    absl::StatusOr<absl::Duration> t = parse_seconds("timeout", flags->get("timeout"));
    if (!t.ok()) return usage(t.status());
    timeout = *t;
  }
  const bool cancel = flags->has("cancel");
  auto client = head_client(*flags);
  if (!client.ok()) return fail(client.status());
  absl::Status s =
      client->head
          .call(&HeadService::drain_node, node, !cancel, flags->get("reason", "troupe drain"))
          .get(absl::Seconds(10));
  if (!s.ok()) {
    const bool refused =
        absl::IsNotFound(s) || absl::IsFailedPrecondition(s) || absl::IsInvalidArgument(s);
    return fail(refused ? s : explain_head_error(s, *flags));
  }
  if (cancel) {
    std::printf("troupe drain: node %u takes new work again\n", node);
    return 0;
  }
  std::printf("troupe drain: node %u is draining; elastic jobs leave it at their next step\n",
              node);
  std::fflush(stdout);
  if (timeout == absl::ZeroDuration()) return 0;
  const absl::Time deadline = absl::Now() + timeout;
  std::string last;
  while (true) {
    absl::StatusOr<ClusterStatus> status = fetch_status(*client, *flags);
    if (!status.ok()) return fail(status.status());
    const NodeStatus* n = find_node_in(*status, node);
    if (n == nullptr || n->state == NodeState::kDead) {
      std::printf("troupe drain: node %u left the cluster\n", node);
      return 0;
    }
    const std::string left = actors_on(*status, node);
    if (left.empty()) {
      std::printf(
          "troupe drain: node %u is drained: it hosts no actors; its worker can be "
          "stopped\n",
          node);
      return 0;
    }
    if (absl::Now() >= deadline) {
      std::fprintf(stderr,
                   "troupe drain: node %u still hosts %s after %s: a job without elasticity "
                   "enabled, or one that cannot shrink, does not leave it (stop that job, or "
                   "`troupe drain %u --cancel`); the node stays drained\n",
                   node, left.c_str(), absl::FormatDuration(timeout).c_str(), node);
      return 1;
    }
    if (left != last) {
      std::printf("  waiting: node %u hosts %s\n", node, left.c_str());
      std::fflush(stdout);
      last = left;
    }
    absl::SleepFor(absl::Milliseconds(200));
  }
}

int stop_command(const std::vector<std::string>& args) {
  auto flags = Flags::parse("stop", args, {"head", "token-file"});
  if (!flags.ok()) return usage(flags.status());
  if (flags->help()) {
    std::printf(
        "usage: troupe stop [--head HOST:PORT] [--token-file PATH]\n\n"
        "Stops the cluster (as `ray stop`): every worker exits, then the head.\n");
    return 0;
  }
  auto client = head_client(*flags);
  if (!client.ok()) return fail(client.status());
  absl::Status s = client->head.call(&HeadService::stop).get(absl::Seconds(10));
  if (!s.ok()) return fail(explain_head_error(s, *flags));
  std::printf("troupe stop: the cluster at %s is stopping\n",
              resolve_head(*flags).value_or("?").c_str());
  return 0;
}

}  // namespace troupe::cluster
