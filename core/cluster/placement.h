// Placement groups as a user names them (ray.util.placement_group): the
// strategy that spreads or packs a group's bundles, and the id of a group.
// The scheduler that places them is internal (detail/scheduler.h).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "absl/status/statusor.h"

namespace troupe::cluster {

enum class PlacementStrategy { kPack, kSpread, kStrictPack, kStrictSpread };

// "PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD", in any case.
// Errors: InvalidArgument listing the valid names.
[[nodiscard]] absl::StatusOr<PlacementStrategy> parse_placement_strategy(std::string_view text);
// The upper-case name, as parse_placement_strategy() takes it.
std::string_view to_string(PlacementStrategy strategy);

struct PlacementGroupId {
  uint64_t value = 0;  // 0 is never assigned

  bool valid() const { return value != 0; }
  friend auto operator<=>(const PlacementGroupId&, const PlacementGroupId&) = default;
  template <typename H>
  friend H AbslHashValue(H h, const PlacementGroupId& id) {
    return H::combine(std::move(h), id.value);
  }
};

// "pg-<value>", as shown in errors.
std::string to_string(PlacementGroupId id);

}  // namespace troupe::cluster
