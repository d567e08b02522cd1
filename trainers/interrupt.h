// Ctrl-C in `troupe train`: the first SIGINT (or SIGTERM, as a scheduler
// sends to preempt a job) asks the run to stop after the step in flight -
// it then saves a checkpoint and its weights, says how to resume, and cleans
// up; a second one stops the process at once, as the signal's default does.
//
//   InterruptGuard guard;                  // for as long as the run lasts
//   for (...) { if (guard.requested()) break; ... }
#pragma once

#include <string>
#include <vector>

namespace troupe::trainers {

class InterruptGuard {
 public:
  // Installs the handlers; the signals' previous dispositions come back with
  // the destructor. One guard at a time in a process.
  InterruptGuard();
  ~InterruptGuard();
  InterruptGuard(const InterruptGuard&) = delete;
  InterruptGuard& operator=(const InterruptGuard&) = delete;

  // Whether a stop was asked for; the signal's number (SIGINT, SIGTERM), 0
  // for none.
  bool requested() const { return signal() != 0; }
  int signal() const;
};

// The command that continues a `troupe train` run of arguments `args` (as
// given after "train") from its newest checkpoint: the same, each argument
// quoted for a shell where it needs it, with --resume.
std::string resume_command(const std::vector<std::string>& args);

}  // namespace troupe::trainers
