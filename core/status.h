// Errors in troupe are values: absl::Status and absl::StatusOr<T>.
//
// The core runtime distinguishes four failure kinds that callers act on
// differently; each carries a human-readable reason in its message.
//   ActorDied        the target actor is gone (method threw, killed, node lost)
//   Unavailable      the target cannot be reached right now; retrying may help
//   DeadlineExceeded a wait or send ran past its deadline
//   Aborted          the operation was cancelled as part of a larger abort
// ActorDied is final - asking the same actor again is pointless unless it is
// restarted - so it is not an Unavailable code (which absl::IsUnavailable and
// retry loops take as "try again"): it is absl::StatusCode::kFailedPrecondition
// ("do not retry until the system state is fixed") with a payload that marks
// it, printed as "FAILED_PRECONDITION: <reason> [troupe.dev/core-error='ActorDied']".
// Use IsActorDied() or core_error() rather than the raw code.
#pragma once

#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace troupe {

enum class CoreError {
  kOk,
  kActorDied,
  kUnavailable,
  kDeadlineExceeded,
  kAborted,
  kOther,  // any other absl::Status code (InvalidArgument, NotFound, ...)
};

// Builds an ActorDied error; `reason` says which actor died and why.
absl::Status ActorDiedError(std::string_view reason);

// Classifies a status into the core error kinds above.
CoreError core_error(const absl::Status& status);

inline bool IsActorDied(const absl::Status& status) {
  return core_error(status) == CoreError::kActorDied;
}

std::string_view to_string(CoreError error);

// The same error - its code and payloads, so that IsActorDied still holds -
// with `prefix` before its message: "step 4: " + "actor-7 was on node 2 ...".
absl::Status Prefixed(std::string_view prefix, const absl::Status& status);

}  // namespace troupe
