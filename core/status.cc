#include "core/status.h"

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"

namespace troupe {
namespace {
constexpr absl::string_view kErrorPayloadUrl = "troupe.dev/core-error";
constexpr absl::string_view kActorDiedPayload = "ActorDied";
}  // namespace

absl::Status Prefixed(std::string_view prefix, const absl::Status& status) {
  if (status.ok()) return status;
  absl::Status out(status.code(),
                   absl::StrCat(absl::string_view(prefix.data(), prefix.size()), status.message()));
  status.ForEachPayload(
      [&](absl::string_view url, const absl::Cord& payload) { out.SetPayload(url, payload); });
  return out;
}

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
