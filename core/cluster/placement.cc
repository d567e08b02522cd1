#include "core/cluster/placement.h"

#include <array>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace troupe::cluster {
namespace {

absl::string_view to_absl(std::string_view s) {
  return absl::string_view(s.data(), s.size());
}

constexpr std::array<std::pair<PlacementStrategy, std::string_view>, 4> kStrategyNames = {{
    {PlacementStrategy::kPack, "PACK"},
    {PlacementStrategy::kSpread, "SPREAD"},
    {PlacementStrategy::kStrictPack, "STRICT_PACK"},
    {PlacementStrategy::kStrictSpread, "STRICT_SPREAD"},
}};

}  // namespace

absl::StatusOr<PlacementStrategy> parse_placement_strategy(std::string_view text) {
  std::string upper = absl::AsciiStrToUpper(to_absl(text));
  for (const auto& [strategy, name] : kStrategyNames) {
    if (upper == name) return strategy;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown placement strategy '", to_absl(text),
                   "': expected PACK, SPREAD, STRICT_PACK or STRICT_SPREAD"));
}

std::string_view to_string(PlacementStrategy strategy) {
  for (const auto& [s, name] : kStrategyNames) {
    if (s == strategy) return name;
  }
  return "UNKNOWN";
}

std::string to_string(PlacementGroupId id) {
  return absl::StrCat("pg-", id.value);
}

}  // namespace troupe::cluster
