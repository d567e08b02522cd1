#include "tests/cluster/probe_actors.h"

#include <unistd.h>

#include <chrono>
#include <thread>

namespace troupe::testing {

int64_t Probe::pid() const {
  return ::getpid();
}

bool Probe::hold(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(std::min(ms, 30000)));
  return true;
}

}  // namespace troupe::testing
