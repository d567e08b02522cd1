// The stage's clock for its step report and its syncs' communication times:
// milliseconds on the steady clock.
#pragma once

#include <chrono>

namespace troupe::actors {

inline double ms_since_epoch(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(t.time_since_epoch()).count();
}

inline double now_ms() {
  return ms_since_epoch(std::chrono::steady_clock::now());
}

}  // namespace troupe::actors
