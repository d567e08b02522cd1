// What `troupe head` and `troupe worker` do to their own process for clusters
// of many machines: raise the open-file limit, and - the worker of a launch's
// rank 0 - start the launch's head as a child process.
#pragma once

#include <sys/types.h>

#include "absl/status/statusor.h"
#include "core/cluster/launch_env.h"

namespace troupe::cluster {

// A head holds a connection to every node, and a worker one to each peer it
// calls: the soft limit on open files (often 1,024) is raised to the hard one.
// A failure is logged, not returned.
void raise_open_file_limit();

// Starts `troupe head` (this executable) in a child process for launch
// `launched`: on its port, with a state directory of its own (two jobs may
// share a machine), inheriting the launch environment (its token). The child
// gets SIGTERM should this process die. Errors: Internal (fork failed).
absl::StatusOr<pid_t> start_head_process(const LaunchEnv& launched);

// A head start_head_process() started: stopped (SIGTERM, then SIGKILL after
// 5 s) and reaped when this goes.
class HeadChild {
 public:
  explicit HeadChild(pid_t pid) : pid_(pid) {}
  HeadChild(const HeadChild&) = delete;
  HeadChild& operator=(const HeadChild&) = delete;
  ~HeadChild();

 private:
  pid_t pid_;
};

}  // namespace troupe::cluster
