#include "core/cluster/launch_env.h"

#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace troupe::cluster {
namespace {

constexpr uint16_t kDefaultHeadPort = 6380;
// Expanding "n[1-100000]" would be a mistake in the list, not a cluster.
constexpr size_t kMaxHosts = 1 << 20;

std::optional<std::string> get(const EnvLookup& env, const char* name) {
  const char* v = env(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

absl::Status bad(const char* name, const std::string& value, const std::string& expected) {
  return absl::InvalidArgumentError(
      absl::StrCat(name, "=", value, " in the launch environment: expected ", expected));
}

absl::StatusOr<int> get_int(const EnvLookup& env, const char* name, int fallback) {
  std::optional<std::string> v = get(env, name);
  if (!v) return fallback;
  int n = 0;
  if (!absl::SimpleAtoi(*v, &n) || n < 0) return bad(name, *v, "a number, 0 or more");
  return n;
}

absl::StatusOr<uint16_t> get_port(const EnvLookup& env, const char* name, uint16_t fallback) {
  std::optional<std::string> v = get(env, name);
  if (!v) return fallback;
  int n = 0;
  if (!absl::SimpleAtoi(*v, &n) || n < 1 || n > 65535) return bad(name, *v, "a port, 1-65535");
  return static_cast<uint16_t>(n);
}

// Splits `s` at commas outside brackets.
std::vector<std::string> split_top(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  int depth = 0;
  for (char c : s) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (c == ',' && depth == 0) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(cur);
  return out;
}

// The numbers a bracket's ranges name ("01-03,7"), zero-padded as written.
std::optional<std::vector<std::string>> expand_ranges(const std::string& ranges) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= ranges.size()) {
    size_t comma = ranges.find(',', start);
    std::string part =
        ranges.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    size_t dash = part.find('-');
    std::string lo_text = part.substr(0, dash);
    std::string hi_text = dash == std::string::npos ? lo_text : part.substr(dash + 1);
    uint64_t lo = 0, hi = 0;
    if (lo_text.empty() || !absl::SimpleAtoi(lo_text, &lo) || !absl::SimpleAtoi(hi_text, &hi) ||
        hi < lo || hi - lo > kMaxHosts) {
      return std::nullopt;
    }
    for (uint64_t n = lo; n <= hi; ++n)
      out.push_back(absl::StrFormat("%0*d", static_cast<int>(lo_text.size()), n));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

std::optional<std::vector<std::string>> expand_item(const std::string& item) {
  size_t open = item.find('[');
  if (open == std::string::npos) {
    if (item.find(']') != std::string::npos) return std::nullopt;
    return std::vector<std::string>{item};
  }
  size_t close = item.find(']', open);
  if (close == std::string::npos) return std::nullopt;
  std::optional<std::vector<std::string>> numbers =
      expand_ranges(item.substr(open + 1, close - open - 1));
  std::optional<std::vector<std::string>> rests = expand_item(item.substr(close + 1));
  if (!numbers || !rests) return std::nullopt;
  std::vector<std::string> out;
  const std::string prefix = item.substr(0, open);
  for (const std::string& n : *numbers) {
    for (const std::string& rest : *rests) {
      if (out.size() >= kMaxHosts) return std::nullopt;
      out.push_back(prefix + n + rest);
    }
  }
  return out;
}

absl::StatusOr<std::optional<LaunchEnv>> slurm(const EnvLookup& env) {
  std::optional<std::string> job = get(env, "SLURM_JOB_ID");
  if (!job) return std::nullopt;
  const char* list_var = "SLURM_STEP_NODELIST";
  std::optional<std::string> list = get(env, list_var);
  if (!list) list = get(env, list_var = "SLURM_JOB_NODELIST");
  if (!list) list = get(env, list_var = "SLURM_NODELIST");
  // Inside the allocation but not in a step (nor given its nodes): nothing to join.
  if (!list) return std::nullopt;
  absl::StatusOr<std::vector<std::string>> hosts = expand_slurm_hostlist(*list);
  if (!hosts.ok()) return bad(list_var, *list, "a Slurm node list such as node[01-04]");
  LaunchEnv e;
  e.manager = "slurm";
  e.head_host = hosts->front();
  uint64_t job_number = 0;
  if (!absl::SimpleAtoi(*job, &job_number)) return bad("SLURM_JOB_ID", *job, "a number");
  absl::StatusOr<uint16_t> port =
      get_port(env, "TROUPE_HEAD_PORT", static_cast<uint16_t>(15000 + job_number % 10000));
  if (!port.ok()) return port.status();
  e.head_port = *port;
  absl::StatusOr<int> rank = get_int(env, "SLURM_PROCID", 0);
  if (!rank.ok()) return rank.status();
  e.rank = *rank;
  absl::StatusOr<int> world = get_int(env, "SLURM_NTASKS", 0);
  if (!world.ok()) return world.status();
  e.world_size = *world;
  return e;
}

absl::StatusOr<std::optional<LaunchEnv>> torchrun(const EnvLookup& env) {
  // Kubeflow's PyTorchJob sets both; its PET_* ones are torchrun's arguments.
  const bool kubeflow = get(env, "PET_MASTER_ADDR").has_value();
  const char* addr_var = kubeflow ? "PET_MASTER_ADDR" : "MASTER_ADDR";
  std::optional<std::string> addr = get(env, addr_var);
  if (!addr) return std::nullopt;
  LaunchEnv e;
  e.manager = kubeflow ? "kubeflow" : "torchrun";
  e.head_host = *addr;
  const char* port_var = get(env, "TROUPE_HEAD_PORT")              ? "TROUPE_HEAD_PORT"
                         : kubeflow && get(env, "PET_MASTER_PORT") ? "PET_MASTER_PORT"
                                                                   : "MASTER_PORT";
  absl::StatusOr<uint16_t> port = get_port(env, port_var, 29500);  // torchrun's default
  if (!port.ok()) return port.status();
  e.head_port = *port;
  // A node's rank: torchrun's GROUP_RANK (PET_NODE_RANK), else the global RANK.
  const char* rank_var = get(env, "GROUP_RANK")      ? "GROUP_RANK"
                         : get(env, "PET_NODE_RANK") ? "PET_NODE_RANK"
                                                     : "RANK";
  absl::StatusOr<int> rank = get_int(env, rank_var, 0);
  if (!rank.ok()) return rank.status();
  e.rank = *rank;
  const char* world_var = get(env, "PET_NNODES") ? "PET_NNODES" : "WORLD_SIZE";
  absl::StatusOr<int> world = get_int(env, world_var, 0);
  if (!world.ok()) return world.status();
  e.world_size = *world;
  return e;
}

absl::StatusOr<std::optional<LaunchEnv>> jobset(const EnvLookup& env) {
  std::optional<std::string> name = get(env, "JOBSET_NAME");
  std::optional<std::string> job = get(env, "REPLICATED_JOB_NAME");
  if (!name || !job) return std::nullopt;
  LaunchEnv e;
  e.manager = "jobset";
  std::string subdomain = get(env, "TROUPE_JOBSET_SUBDOMAIN").value_or(*name);
  e.head_host = absl::StrCat(*name, "-", *job, "-0-0.", subdomain);
  absl::StatusOr<uint16_t> port = get_port(env, "TROUPE_HEAD_PORT", kDefaultHeadPort);
  if (!port.ok()) return port.status();
  e.head_port = *port;
  absl::StatusOr<int> job_index = get_int(env, "JOB_INDEX", 0);
  if (!job_index.ok()) return job_index.status();
  absl::StatusOr<int> pod = get_int(env, "JOB_COMPLETION_INDEX", 0);
  if (!pod.ok()) return pod.status();
  // Pods of later jobs never run the head: only job 0's pod 0 has rank 0.
  absl::StatusOr<int> per_job = get_int(env, "TROUPE_PODS_PER_JOB", 1 << 16);
  if (!per_job.ok()) return per_job.status();
  e.rank = *job_index * *per_job + *pod;
  absl::StatusOr<int> world = get_int(env, "TROUPE_WORLD_SIZE", 0);
  if (!world.ok()) return world.status();
  e.world_size = *world;
  return e;
}

}  // namespace

std::string LaunchEnv::head_address() const {
  return absl::StrCat(head_host, ":", head_port);
}

std::string LaunchEnv::describe() const {
  return absl::StrCat(manager, " rank ", rank,
                      world_size > 0 ? absl::StrCat(" of ", world_size) : std::string(),
                      ", head at ", head_address());
}

EnvLookup process_env() {
  return [](const char* name) { return std::getenv(name); };
}

absl::StatusOr<std::vector<std::string>> expand_slurm_hostlist(const std::string& list) {
  std::vector<std::string> hosts;
  for (const std::string& item : split_top(list)) {
    if (item.empty()) continue;
    std::optional<std::vector<std::string>> expanded = expand_item(item);
    if (!expanded) {
      return absl::InvalidArgumentError(absl::StrCat("'", item, "' is not a Slurm host list item"));
    }
    hosts.insert(hosts.end(), expanded->begin(), expanded->end());
    if (hosts.size() > kMaxHosts) return absl::InvalidArgumentError("too many hosts");
  }
  if (hosts.empty()) return absl::InvalidArgumentError("an empty host list");
  return hosts;
}

absl::StatusOr<std::optional<LaunchEnv>> detect_launch_env(const EnvLookup& env) {
  // Slurm first: an srun inside a JobSet or a torchrun inside Slurm is
  // rare, and Slurm's variables are the most specific.
  for (auto detect : {slurm, torchrun, jobset}) {
    absl::StatusOr<std::optional<LaunchEnv>> e = detect(env);
    if (!e.ok() || e->has_value()) return e;
  }
  return std::nullopt;
}

}  // namespace troupe::cluster
