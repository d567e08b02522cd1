#include "core/cluster/local_cluster.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string_view>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace troupe::cluster {
namespace {

constexpr absl::Duration kStopGrace = absl::Seconds(5);

// Reads `fd` to its end, calling `line` for each line.
void read_lines(int fd, const std::function<void(std::string)>& line) {
  std::string pending;
  char buf[4096];
  while (true) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    pending.append(buf, static_cast<size_t>(n));
    for (size_t nl; (nl = pending.find('\n')) != std::string::npos;) {
      line(pending.substr(0, nl));
      pending.erase(0, nl + 1);
    }
  }
  if (!pending.empty()) line(pending);
  ::close(fd);
}

// Runs `argv` with stdout and stderr into a pipe; returns the pid and the
// pipe's read end. The child dies with this process, in a process group of its own.
absl::StatusOr<std::pair<pid_t, int>> run(const std::vector<std::string>& argv,
                                          const std::vector<std::string>& env) {
  // Everything the child needs is prepared before fork(): between fork and
  // exec it may only make async-signal-safe calls.
  std::vector<char*> args;
  for (const std::string& arg : argv)
    args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  // This process's environment, with `env`'s names replaced or added.
  std::vector<char*> envp;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view entry(*e);
    const bool replaced = std::any_of(env.begin(), env.end(), [&](const std::string& v) {
      const size_t eq = v.find('=');
      return entry.substr(0, entry.find('=') + 1) == std::string_view(v).substr(0, eq + 1);
    });
    if (!replaced) envp.push_back(*e);
  }
  for (const std::string& v : env)
    envp.push_back(const_cast<char*>(v.c_str()));
  envp.push_back(nullptr);
  static constexpr char kExecFailed[] = "cannot run the troupe executable\n";
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return absl::InternalError("pipe failed");
  pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);  // the parent is already gone
    // A process group of its own: a Ctrl-C at the terminal reaches the
    // process that started the cluster, which stops it in order, and not
    // the head and workers under it.
    ::setpgid(0, 0);
    ::dup2(fds[1], 1);
    ::dup2(fds[1], 2);
    ::execvpe(args[0], args.data(), envp.data());
    static_cast<void>(::write(2, kExecFailed, sizeof(kExecFailed) - 1));
    ::_exit(127);
  }
  ::close(fds[1]);
  return std::pair{pid, fds[0]};
}

// A local cluster's state directory (its token inside): PREFIX<pid>-XXXXXX.
constexpr char kStateDirPrefix[] = "/tmp/troupe-local-";

// Removes the state directories of local clusters whose process is gone
// (killed before it could remove its own), so no token outlives its cluster.
void remove_stale_state_dirs() {
  std::error_code ec;
  const std::string prefix = std::filesystem::path(kStateDirPrefix).filename().string();
  for (const auto& entry : std::filesystem::directory_iterator("/tmp", ec)) {
    std::string name = entry.path().filename().string();
    if (!name.starts_with(prefix)) continue;
    pid_t pid = 0;
    std::string rest = name.substr(prefix.size());
    if (!absl::SimpleAtoi(rest.substr(0, rest.find('-')), &pid) || pid <= 0) continue;
    struct stat st {};
    if (::lstat(entry.path().c_str(), &st) != 0 || !S_ISDIR(st.st_mode) ||
        st.st_uid != ::geteuid()) {
      continue;
    }
    if (::kill(pid, 0) == 0 || errno != ESRCH) continue;  // still running (or not ours to ask)
    std::filesystem::remove_all(entry.path(), ec);
  }
}

}  // namespace

uint16_t free_loopback_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  uint16_t port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  ::close(fd);
  return port;
}

absl::StatusOr<std::unique_ptr<LocalCluster>> LocalCluster::start(LocalClusterOptions options) {
  std::unique_ptr<LocalCluster> c(new LocalCluster(std::move(options)));
  c->binary_ = c->options_.troupe_binary;
  if (c->binary_.empty()) {
    const char* env = std::getenv("TROUPE_BINARY");
    c->binary_ = env != nullptr && *env != '\0' ? env : "troupe";
  }
  remove_stale_state_dirs();
  std::string dir = absl::StrCat(kStateDirPrefix, ::getpid(), "-XXXXXX");
  if (::mkdtemp(dir.data()) == nullptr) return absl::InternalError("mkdtemp failed");
  c->state_dir_ = dir;
  c->token_file_ = c->state_dir_ + "/token";

  if (c->options_.store.empty()) {
    if (absl::Status s = c->start_head(0); !s.ok()) return s;
  } else {
    std::vector<uint16_t> ports;
    for (int i = 0; i < std::max(1, c->options_.heads); ++i) {
      uint16_t port = free_loopback_port();
      if (port == 0) return absl::UnavailableError("no free port for a head");
      ports.push_back(port);
    }
    if (absl::Status s = c->start_head(ports[0]); !s.ok()) return s;
    for (size_t i = 1; i < ports.size(); ++i) {
      if (absl::Status s = c->start_standby(ports[i]); !s.ok()) return s;
    }
    std::vector<std::string> all;
    for (uint16_t port : ports)
      all.push_back(absl::StrCat("127.0.0.1:", port));
    c->head_address_ = absl::StrJoin(all, ",");
  }

  for (int i = 0; i < c->options_.workers; ++i) {
    std::string resources = i < static_cast<int>(c->options_.worker_resources.size())
                                ? c->options_.worker_resources[i]
                                : c->options_.default_resources;
    const std::vector<std::string>& visible = c->options_.worker_visible_devices;
    auto node = c->start_worker(
        resources, i < static_cast<int>(visible.size()) ? visible[static_cast<size_t>(i)] : "");
    if (!node.ok()) return node.status();
  }
  return c;
}

std::vector<std::string> LocalCluster::head_args(uint16_t port) const {
  std::vector<std::string> args = {"head",
                                   "--port",
                                   absl::StrCat(port),
                                   "--http-port",
                                   "0",
                                   "--state-dir",
                                   state_dir_,
                                   "--heartbeat-timeout",
                                   absl::StrCat(absl::ToDoubleSeconds(options_.heartbeat_timeout))};
  if (!options_.store.empty()) args.insert(args.end(), {"--store", options_.store});
  args.insert(args.end(), options_.head_flags.begin(), options_.head_flags.end());
  return args;
}

absl::Status LocalCluster::start_standby(uint16_t port) {
  auto head = spawn(absl::StrCat("head ", port), head_args(port));
  if (!head.ok()) return head.status();
  auto line = wait_line(
      **head, [&](const std::string& l) { return l.find(": standing by") != std::string::npos; },
      options_.start_timeout);
  standbys_.push_back(*std::move(head));
  return line.status();
}

absl::StatusOr<absl::Duration> LocalCluster::wait_for_new_leader(absl::Duration timeout) {
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + timeout;
  const std::string prefix = "troupe head listening on ";
  while (absl::Now() < deadline) {
    for (size_t i = 0; i < standbys_.size(); ++i) {
      Child& c = *standbys_[i];
      std::string address;
      {
        std::lock_guard<std::mutex> lock(c.mu);
        for (const std::string& l : c.lines) {
          if (l.starts_with(prefix)) address = l.substr(prefix.size());
        }
      }
      if (address.empty()) continue;
      const absl::Duration took = absl::Now() - start;
      deposed_ = std::move(head_);
      head_ = std::move(standbys_[i]);
      standbys_.erase(standbys_.begin() + static_cast<std::ptrdiff_t>(i));
      leader_address_ = address;
      const std::string http = "  status over HTTP: http://";
      auto http_line = wait_line(
          *head_, [&](const std::string& l) { return l.starts_with(http); },
          options_.start_timeout);
      if (http_line.ok()) {
        std::string rest = http_line->substr(http.size());
        http_address_ = rest.substr(0, rest.find('/'));
      }
      return took;
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  return absl::DeadlineExceededError(
      absl::StrCat("no standby head led within ", absl::FormatDuration(timeout)));
}

std::optional<int> LocalCluster::deposed_exit_code(absl::Duration timeout) {
  if (!deposed_ || deposed_->pid <= 0) return std::nullopt;
  const absl::Time deadline = absl::Now() + timeout;
  int status = 0;
  while (::waitpid(deposed_->pid, &status, WNOHANG) == 0) {
    if (absl::Now() >= deadline) return std::nullopt;
    absl::SleepFor(absl::Milliseconds(10));
  }
  deposed_->pid = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::vector<pid_t> LocalCluster::standby_pids() const {
  std::vector<pid_t> pids;
  for (const auto& c : standbys_)
    pids.push_back(c->pid);
  return pids;
}

absl::Status LocalCluster::start_head(uint16_t port) {
  auto head = spawn(port == 0 ? std::string("head") : absl::StrCat("head ", port), head_args(port));
  if (!head.ok()) return head.status();
  head_ = *std::move(head);
  const std::string prefix = "troupe head listening on ";
  auto line = wait_line(
      *head_, [&](const std::string& l) { return l.starts_with(prefix); }, options_.start_timeout);
  if (!line.ok()) return line.status();
  head_address_ = line->substr(prefix.size());
  leader_address_ = head_address_;
  const std::string http = "  status over HTTP: http://";
  auto http_line = wait_line(
      *head_,
      [&](const std::string& l) { return l.starts_with(http) || l.starts_with("  (no HTTP"); },
      options_.start_timeout);
  if (!http_line.ok()) return http_line.status();
  if (http_line->starts_with(http)) {
    std::string rest = http_line->substr(http.size());
    http_address_ = rest.substr(0, rest.find('/'));
  }
  return absl::OkStatus();
}

void LocalCluster::kill_head(int sig) {
  if (head_ && head_->pid > 0) ::kill(head_->pid, sig);
}

absl::Status LocalCluster::restart_head() {
  if (deposed_) {
    // After a failover: the old leader comes back as a standby.
    const std::string name = deposed_->name;
    uint32_t port = 0;
    if (!absl::SimpleAtoi(name.substr(name.rfind(' ') + 1), &port) || port > 65535) {
      return absl::InternalError(absl::StrCat("no port in ", name));
    }
    stop(*deposed_);
    deposed_.reset();
    return start_standby(static_cast<uint16_t>(port));
  }
  uint32_t port = 0;
  if (!absl::SimpleAtoi(head_address_.substr(head_address_.rfind(':') + 1), &port) ||
      port > 65535) {
    return absl::InternalError(absl::StrCat("no port in the head address ", head_address_));
  }
  if (head_) stop(*head_);  // reaps the killed one
  // Its port may linger a moment in the kernel after a kill: try for a while.
  absl::Time deadline = absl::Now() + options_.start_timeout;
  while (true) {
    absl::Status s = start_head(static_cast<uint16_t>(port));
    if (s.ok() || absl::Now() >= deadline) return s;
    stop(*head_);
    absl::SleepFor(absl::Milliseconds(200));
  }
}

bool LocalCluster::worker_running(int i) {
  Child& w = *workers_.at(static_cast<size_t>(i));
  if (w.pid <= 0) return false;
  int status = 0;
  if (::waitpid(w.pid, &status, WNOHANG) == 0) return true;
  w.exit_status = status;
  w.pid = -1;
  return false;
}

std::vector<std::string> LocalCluster::worker_output(int i) {
  Child& w = *workers_.at(static_cast<size_t>(i));
  std::lock_guard<std::mutex> lock(w.mu);
  return w.lines;
}

absl::StatusOr<std::unique_ptr<LocalCluster::Child>> LocalCluster::spawn(
    const std::string& name, const std::vector<std::string>& args,
    const std::vector<std::string>& env) {
  std::vector<std::string> argv = {binary_};
  argv.insert(argv.end(), args.begin(), args.end());
  auto started = run(argv, env);
  if (!started.ok()) return started.status();
  auto child = std::make_unique<Child>();
  child->pid = started->first;
  child->name = name;
  Child* raw = child.get();
  bool echo = options_.echo_output;
  child->reader = std::thread([raw, fd = started->second, echo] {
    read_lines(fd, [&](std::string l) {
      if (echo) std::fprintf(stderr, "[%s] %s\n", raw->name.c_str(), l.c_str());
      std::lock_guard<std::mutex> lock(raw->mu);
      raw->lines.push_back(std::move(l));
      raw->cv.notify_all();
    });
    std::lock_guard<std::mutex> lock(raw->mu);
    raw->closed = true;
    raw->cv.notify_all();
  });
  return child;
}

absl::StatusOr<std::string> LocalCluster::wait_line(
    Child& child, const std::function<bool(const std::string&)>& match, absl::Duration timeout) {
  std::unique_lock<std::mutex> lock(child.mu);
  size_t seen = 0;
  absl::Time deadline = absl::Now() + timeout;
  while (true) {
    for (; seen < child.lines.size(); ++seen) {
      if (match(child.lines[seen])) return child.lines[seen];
    }
    if (child.closed) {
      return absl::UnavailableError(absl::StrCat(
          child.name, " exited before it was ready: ", absl::StrJoin(child.lines, " | ")));
    }
    if (child.cv.wait_until(lock, absl::ToChronoTime(deadline)) == std::cv_status::timeout) {
      return absl::DeadlineExceededError(
          absl::StrCat(child.name, " was not ready within ", absl::FormatDuration(timeout)));
    }
  }
}

absl::StatusOr<uint32_t> LocalCluster::start_worker(const std::string& resources,
                                                    const std::string& visible_devices) {
  std::string name = absl::StrCat("worker ", workers_.size());
  std::vector<std::string> args = {"worker",       "--head",    head_address_,
                                   "--token-file", token_file_, "--resources",
                                   resources,      "--host",    "127.0.0.1"};
  args.insert(args.end(), options_.worker_flags.begin(), options_.worker_flags.end());
  std::vector<std::string> env;
  if (!visible_devices.empty()) env.push_back("CUDA_VISIBLE_DEVICES=" + visible_devices);
  auto child = spawn(name, args, env);
  if (!child.ok()) return child.status();
  const std::string prefix = "troupe worker: node ";
  auto line = wait_line(
      **child, [&](const std::string& l) { return l.starts_with(prefix); }, options_.start_timeout);
  workers_.push_back(*std::move(child));
  if (!line.ok()) return line.status();
  uint32_t node = 0;
  std::string rest = line->substr(prefix.size());
  if (!absl::SimpleAtoi(rest.substr(0, rest.find(' ')), &node)) {
    return absl::InternalError(absl::StrCat("unexpected worker output: ", *line));
  }
  worker_nodes_.push_back(node);
  return node;
}

absl::StatusOr<int> LocalCluster::add_worker(const std::string& resources) {
  auto node = start_worker(resources);
  if (!node.ok()) return node.status();
  return num_workers() - 1;
}

pid_t LocalCluster::worker_pid(int i) const {
  return workers_.at(static_cast<size_t>(i))->pid;
}

uint32_t LocalCluster::worker_node(int i) const {
  return worker_nodes_.at(static_cast<size_t>(i));
}

void LocalCluster::kill_worker(int i, int sig) {
  ::kill(worker_pid(i), sig);
}

ClusterOptions LocalCluster::client_options() const {
  return ClusterOptions{.head = head_address_, .token_file = token_file_, .name = "driver"};
}

std::pair<int, std::string> LocalCluster::run_cli(const std::vector<std::string>& args) const {
  std::vector<std::string> argv = {binary_};
  argv.insert(argv.end(), args.begin(), args.end());
  auto given = [&](const char* flag) {
    return std::find(args.begin(), args.end(), flag) != args.end();
  };
  if (!given("--head")) argv.insert(argv.end(), {"--head", head_address_});
  if (!given("--token-file")) argv.insert(argv.end(), {"--token-file", token_file_});
  auto started = run(argv, {});
  if (!started.ok()) return {-1, std::string(started.status().message())};
  std::string out;
  read_lines(started->second, [&](std::string l) { out += l + "\n"; });
  int status = 0;
  ::waitpid(started->first, &status, 0);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), out};
}

void LocalCluster::stop(Child& child) {
  if (child.pid > 0) {
    ::kill(child.pid, SIGTERM);
    absl::Time deadline = absl::Now() + kStopGrace;
    int status = 0;
    while (::waitpid(child.pid, &status, WNOHANG) == 0) {
      if (absl::Now() >= deadline) {
        ::kill(child.pid, SIGKILL);
        ::waitpid(child.pid, &status, 0);
        break;
      }
      absl::SleepFor(absl::Milliseconds(10));
    }
    child.pid = -1;
  }
  if (child.reader.joinable()) child.reader.join();
}

LocalCluster::~LocalCluster() {
  for (auto& w : workers_)
    stop(*w);
  if (head_) stop(*head_);
  for (auto& h : standbys_)
    stop(*h);
  if (deposed_) stop(*deposed_);
  std::error_code ignored;
  std::filesystem::remove_all(state_dir_, ignored);
}

}  // namespace troupe::cluster
