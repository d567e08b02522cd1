#include "actors/mesh.h"

#include "absl/strings/str_cat.h"

namespace troupe::actors {

std::string actor_name(const std::string& job, const std::string& kind, const Coordinate& at) {
  return absl::StrCat(job, "/", kind, "/d", at.d, ".p", at.p, ".t", at.t);
}

}  // namespace troupe::actors
