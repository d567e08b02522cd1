// Starting, waiting for and collecting a group of rank processes; see
// run_group in collective_bench.h.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "bench/collective_bench.h"

extern char** environ;

namespace troupe::bench::collective {
namespace {

constexpr absl::Duration kGraceAfterFailure = absl::Seconds(10);
constexpr absl::Duration kGraceAfterTerm = absl::Seconds(5);
constexpr int kExitNotStarted = 127;

// The environment of mpirun: ours, with running as root allowed (containers
// run as root; Open MPI refuses it otherwise).
std::vector<std::string> mpi_environment() {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e)
    env.emplace_back(*e);
  env.emplace_back("OMPI_ALLOW_RUN_AS_ROOT=1");
  env.emplace_back("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1");
  return env;
}

std::vector<char*> c_strings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (std::string& s : strings)
    out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// fork + exec of argv[0] (a path); -1 if fork failed. The child ends with
// kExitNotStarted if exec fails.
pid_t spawn(std::vector<std::string> argv, std::vector<std::string>* env) {
  std::vector<char*> args = c_strings(argv);
  std::vector<char*> envp = env != nullptr ? c_strings(*env) : std::vector<char*>{};
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::execve(args[0], args.data(), env != nullptr ? envp.data() : environ);
    std::fprintf(stderr, "collective_bench: cannot run %s: %s\n", args[0], std::strerror(errno));
    ::_exit(kExitNotStarted);
  }
  return pid;
}

struct Child {
  pid_t pid = -1;
  int exit_code = -1;  // -1 while running; 128 + signal when killed
  bool done = false;
};

// Waits for every child; past `deadline`, or kGraceAfterFailure after the
// first failure, kills those still running (SIGTERM, then SIGKILL after
// kGraceAfterTerm: mpirun passes SIGTERM on to its ranks). Returns whether
// the group ended by itself in time. Bounded: every round sleeps at least a
// millisecond and the deadlines end the loop.
bool wait_all(std::vector<Child>& children, absl::Time deadline) {
  absl::Duration backoff = absl::Milliseconds(1);
  absl::Time kill_at = deadline;
  absl::Time term_sent = absl::InfiniteFuture();
  bool in_time = true;
  for (;;) {
    bool running = false;
    for (Child& c : children) {
      if (c.done) continue;
      int status = 0;
      pid_t r = ::waitpid(c.pid, &status, WNOHANG);
      if (r == c.pid || (r < 0 && errno == ECHILD)) {
        c.done = true;
        c.exit_code = r < 0                 ? kExitFailed
                      : WIFEXITED(status)   ? WEXITSTATUS(status)
                      : WIFSIGNALED(status) ? 128 + WTERMSIG(status)
                                            : kExitFailed;
        if (c.exit_code != 0) kill_at = std::min(kill_at, absl::Now() + kGraceAfterFailure);
      } else {
        running = true;
      }
    }
    if (!running) return in_time;
    absl::Time now = absl::Now();
    if (now >= kill_at && term_sent == absl::InfiniteFuture()) {
      in_time = now < deadline;
      for (Child& c : children) {
        if (!c.done) ::kill(c.pid, SIGTERM);
      }
      term_sent = now;
    } else if (now >= term_sent + kGraceAfterTerm) {
      for (Child& c : children) {
        if (!c.done) ::kill(c.pid, SIGKILL);
      }
    }
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, absl::Milliseconds(50));
  }
}

std::vector<std::string> rank_argv(Library library, int rank, int ranks, const Plan& plan,
                                   const GroupOptions& o) {
  std::vector<std::string> argv = {o.self, absl::StrCat("--", name_of(library), "-child"),
                                   "--run-dir", o.run_dir};
  if (library != Library::kMpi) {
    argv.insert(argv.end(), {"--rank", std::to_string(rank), "--size", std::to_string(ranks)});
  }
  if (library == Library::kTroupe) {
    argv.insert(argv.end(), {"--transport", o.transport, "--algorithm", o.algorithm,
                             "--shared-memory", o.shared_memory ? "on" : "off"});
  }
  for (std::string& flag : plan_flags(plan))
    argv.push_back(std::move(flag));
  return argv;
}

// mpirun with `ranks` copies of the rank command, all on this host, sharing
// the cores (--oversubscribe, --bind-to none: as troupe's and Gloo's ranks
// do), over the ob1 messaging layer with the shared-memory (vader) and self
// transports only, and loopback for Open MPI's own control messages.
std::vector<std::string> mpi_argv(int ranks, const Plan& plan, const GroupOptions& o) {
  constexpr char kFlags[] =
      "--allow-run-as-root --oversubscribe --bind-to none "
      "--mca pml ob1 --mca btl self,vader --mca oob_tcp_if_include lo";
  std::vector<std::string> argv = {o.mpirun, "-np", std::to_string(ranks)};
  for (absl::string_view flag : absl::StrSplit(kFlags, ' '))
    argv.emplace_back(flag);
  for (std::string& arg : rank_argv(Library::kMpi, 0, ranks, plan, o))
    argv.push_back(std::move(arg));
  return argv;
}

}  // namespace

const char* name_of(Library library) {
  switch (library) {
    case Library::kTroupe:
      return "troupe";
    case Library::kGloo:
      return "gloo";
    case Library::kMpi:
      return "mpi";
  }
  return "?";
}

std::string find_on_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return "";
  for (absl::string_view dir : absl::StrSplit(path, ':', absl::SkipEmpty())) {
    std::string candidate = absl::StrCat(dir, "/", program);
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

absl::StatusOr<RankFigures> run_group(Library library, int ranks, const Plan& plan,
                                      const GroupOptions& options) {
  std::vector<Child> children;
  if (library == Library::kMpi) {
    std::vector<std::string> env = mpi_environment();
    children.push_back({spawn(mpi_argv(ranks, plan, options), &env)});
  } else {
    for (int r = 0; r < ranks; ++r)
      children.push_back({spawn(rank_argv(library, r, ranks, plan, options), nullptr)});
  }
  for (Child& c : children) {
    if (c.pid < 0) {
      c.done = true;
      c.exit_code = kExitNotStarted;
    }
  }
  const std::string what = absl::StrCat(name_of(library), " with ", ranks, " ranks");
  if (!wait_all(children, absl::Now() + options.timeout)) {
    return absl::DeadlineExceededError(absl::StrCat(
        what, " did not finish within ", absl::FormatDuration(options.timeout), "; killed"));
  }
  // A wrong result first: the other ranks then fail only for the one that left.
  for (const Child& c : children) {
    if (c.exit_code == kExitWrongResult) {
      return absl::DataLossError(absl::StrCat(what, ": a rank found a wrong allreduce result"));
    }
  }
  for (const Child& c : children) {
    if (c.exit_code != 0) {
      return absl::InternalError(absl::StrCat(what, ": a process exited with code ", c.exit_code));
    }
  }
  RankFigures slowest;
  for (int r = 0; r < ranks; ++r) {
    absl::StatusOr<RankFigures> f = read_figures(figures_path(options.run_dir, r));
    if (!f.ok()) return f.status();
    for (const auto& [bytes, seconds] : f->seconds)
      slowest.seconds[bytes] = std::max(slowest.seconds[bytes], seconds);
    slowest.latency = std::max(slowest.latency, f->latency);
  }
  return slowest;
}

}  // namespace troupe::bench::collective
