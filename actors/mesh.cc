#include "actors/mesh.h"

#include "absl/strings/str_cat.h"

namespace troupe::actors {

bool contains(const Mesh& mesh, const Coordinate& at) {
  return at.d >= 0 && at.d < mesh.dp && at.p >= 0 && at.p < mesh.pp && at.t >= 0 && at.t < mesh.tp;
}

int index_of(const Mesh& mesh, const Coordinate& at) {
  return (at.d * mesh.pp + at.p) * mesh.tp + at.t;
}

std::string to_string(const Coordinate& at) {
  return absl::StrCat("d", at.d, ".p", at.p, ".t", at.t);
}

std::string actor_name(const std::string& job, const std::string& kind, const Coordinate& at) {
  return absl::StrCat(job, "/", kind, "/", to_string(at));
}

}  // namespace troupe::actors
