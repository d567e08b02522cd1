#include "bench/bench_actors.h"

#include <unistd.h>

namespace troupe::bench {

int64_t Echo::pid() const {
  return ::getpid();
}

}  // namespace troupe::bench
