#include "actors/failpoint.h"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace troupe::actors {
namespace {

struct Armed {
  bool set = false;
  std::string phase;
  std::string at;
  int64_t step = 0;
  std::string file;
  bool hang = false;  // TROUPE_FAILPOINT_ACTION=hang
};

constexpr absl::Duration kLongestHang = absl::Minutes(10);

const Armed& armed() {
  static const Armed a = [] {
    Armed out;
    const char* spec = std::getenv("TROUPE_FAILPOINT");
    if (spec == nullptr || *spec == '\0') return out;
    std::vector<std::string> parts = absl::StrSplit(spec, absl::MaxSplits(':', 3));
    if (parts.size() != 4 || !absl::SimpleAtoi(parts[2], &out.step)) {
      std::fprintf(stderr, "TROUPE_FAILPOINT=%s: expected PHASE:COORDINATE:STEP:ARMED_FILE\n",
                   spec);
      return out;
    }
    out.phase = parts[0];
    out.at = parts[1];
    out.file = parts[3];
    const char* action = std::getenv("TROUPE_FAILPOINT_ACTION");
    out.hang = action != nullptr && std::string_view(action) == "hang";
    out.set = true;
    return out;
  }();
  return a;
}

}  // namespace

void failpoint(std::string_view phase, const Coordinate& at, int64_t step) {
  const Armed& a = armed();
  if (!a.set || step != a.step || phase != a.phase || to_string(at) != a.at) return;
  if (::unlink(a.file.c_str()) != 0) return;  // disarmed, or fired already
  if (a.hang) {
    std::fprintf(stderr, "failpoint %s of step %lld at %s: this thread hangs now\n",
                 a.phase.c_str(), static_cast<long long>(step), a.at.c_str());
    std::fflush(stderr);
    absl::SleepFor(kLongestHang);
    return;
  }
  std::fprintf(stderr, "failpoint %s of step %lld at %s: this process dies now\n", a.phase.c_str(),
               static_cast<long long>(step), a.at.c_str());
  std::fflush(stderr);
  ::kill(::getpid(), SIGKILL);
}

}  // namespace troupe::actors
