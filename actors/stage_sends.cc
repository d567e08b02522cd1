#include "actors/stage_sends.h"

#include "absl/strings/str_cat.h"
#include "core/executor.h"

namespace troupe::actors {
namespace {

// How often a wait looks at go_on: a failed pipe lets go of its sends.
constexpr absl::Duration kPoll = absl::Milliseconds(50);

}  // namespace

absl::Status StageSends::await(const void* memory, const GoOn& go_on, absl::Time deadline) {
  return await_if(memory, /*all=*/false, go_on, deadline);
}

absl::Status StageSends::await_all(const GoOn& go_on, absl::Time deadline) {
  return await_if(nullptr, /*all=*/true, go_on, deadline);
}

absl::Status StageSends::await_if(const void* memory, bool all, const GoOn& go_on,
                                  absl::Time deadline) {
  absl::Status first;
  for (auto it = in_flight_.begin(); it != in_flight_.end();) {
    if (!all && it->first != memory) {
      ++it;
      continue;
    }
    const Work& work = it->second;
    if (!work.done()) {
      BlockingRegion region;  // other actors of the process run meanwhile
      while (!work.done()) {
        if (go_on) {
          if (absl::Status s = go_on(); !s.ok()) return s;
        }
        if (absl::Now() >= deadline) {
          return absl::DeadlineExceededError(
              absl::StrCat("a send to the next or previous stage was not done by its deadline (",
                           in_flight_.size(), " in flight)"));
        }
        static_cast<void>(work.wait(kPoll));
      }
    }
    if (absl::Status s = work.wait(); !s.ok() && first.ok()) first = s;
    it = in_flight_.erase(it);
  }
  return first;
}

}  // namespace troupe::actors
