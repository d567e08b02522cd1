#include "core/status.h"

#include "absl/strings/cord.h"

namespace troupe {
namespace {
constexpr absl::string_view kErrorPayloadUrl = "troupe.dev/core-error";
constexpr absl::string_view kActorDiedPayload = "ActorDied";
}  // namespace

absl::Status ActorDiedError(std::string_view reason) {
  absl::Status status(absl::StatusCode::kFailedPrecondition,
                      absl::string_view(reason.data(), reason.size()));
  status.SetPayload(kErrorPayloadUrl, absl::Cord(kActorDiedPayload));
  return status;
}

CoreError core_error(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return CoreError::kOk;
    case absl::StatusCode::kFailedPrecondition: {
      auto payload = status.GetPayload(kErrorPayloadUrl);
      if (payload && *payload == kActorDiedPayload) return CoreError::kActorDied;
      return CoreError::kOther;
    }
    case absl::StatusCode::kUnavailable:
      return CoreError::kUnavailable;
    case absl::StatusCode::kDeadlineExceeded:
      return CoreError::kDeadlineExceeded;
    case absl::StatusCode::kAborted:
      return CoreError::kAborted;
    default:
      return CoreError::kOther;
  }
}

std::string_view to_string(CoreError error) {
  switch (error) {
    case CoreError::kOk:
      return "Ok";
    case CoreError::kActorDied:
      return "ActorDied";
    case CoreError::kUnavailable:
      return "Unavailable";
    case CoreError::kDeadlineExceeded:
      return "DeadlineExceeded";
    case CoreError::kAborted:
      return "Aborted";
    case CoreError::kOther:
      break;
  }
  return "Other";
}

}  // namespace troupe
