#include "core/ids.h"

#include "absl/strings/str_cat.h"

namespace troupe {

std::string to_string(ActorId id) {
  return absl::StrCat("actor-", id.node(), "-", id.sequence());
}

}  // namespace troupe
