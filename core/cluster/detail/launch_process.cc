#include "core/cluster/detail/launch_process.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/cluster/commands.h"
#include "core/cluster/detail/member.h"
#include "spdlog/spdlog.h"

namespace troupe::cluster {

void raise_open_file_limit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= limit.rlim_max) return;
  limit.rlim_cur = limit.rlim_max;
  if (::setrlimit(RLIMIT_NOFILE, &limit) != 0) {
    spdlog::warn("cannot raise the open-file limit to {}: {}", limit.rlim_max,
                 std::strerror(errno));
  }
}

absl::StatusOr<pid_t> start_head_process(const LaunchEnv& launched) {
  const std::string port = absl::StrCat(launched.head_port);
  const std::string state_dir =
      absl::StrCat(kDefaultStateDir, "-", launched.manager, "-", launched.head_port);
  pid_t pid = ::fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    ::execl("/proc/self/exe", "troupe", "head", "--port", port.c_str(), "--state-dir",
            state_dir.c_str(), static_cast<char*>(nullptr));
    std::fprintf(stderr, "troupe worker: cannot start the head: %s\n", std::strerror(errno));
    ::_exit(kExitFailed);
  }
  return pid;
}

HeadChild::~HeadChild() {
  ::kill(pid_, SIGTERM);
  for (int i = 0; i < 100; ++i) {
    if (::waitpid(pid_, nullptr, WNOHANG) == pid_) return;
    absl::SleepFor(absl::Milliseconds(50));
  }
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
}

}  // namespace troupe::cluster
