#include "core/actor_type.h"

#include <memory>
#include <mutex>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_split.h"

namespace troupe {
namespace {

struct Registry {
  std::mutex mu;
  absl::flat_hash_map<std::string, std::unique_ptr<ActorTypeInfo>> types;
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: used from static destructors
  return *r;
}

}  // namespace

const ActorTypeInfo* find_actor_type(std::string_view name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.types.find(absl::string_view(name.data(), name.size()));
  return it == r.types.end() ? nullptr : it->second.get();
}

namespace detail {

const ActorTypeInfo& register_actor_type(ActorTypeInfo info) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto [it, inserted] = r.types.try_emplace(info.name, nullptr);
  if (inserted) it->second = std::make_unique<ActorTypeInfo>(std::move(info));
  return *it->second;
}

std::vector<std::string> parse_method_names(std::string_view list) {
  std::vector<std::string> names;
  for (absl::string_view part : absl::StrSplit(absl::string_view(list.data(), list.size()), ',')) {
    part = absl::StripAsciiWhitespace(part);
    if (!part.empty() && part.front() == '&') part.remove_prefix(1);
    part = absl::StripAsciiWhitespace(part);
    // Keep "Class::method": drop any namespace qualification before it.
    size_t last = part.rfind("::");
    if (last != absl::string_view::npos && last > 0) {
      size_t prev = part.rfind("::", last - 1);
      if (prev != absl::string_view::npos && prev + 2 <= last) part.remove_prefix(prev + 2);
    }
    names.emplace_back(part);
  }
  return names;
}

}  // namespace detail
}  // namespace troupe
