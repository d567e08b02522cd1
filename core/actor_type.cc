#include "core/actor_type.h"

#include <algorithm>
#include <deque>
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
  absl::flat_hash_map<uint64_t, const ActorTypeInfo*> by_id;
  absl::flat_hash_map<uint64_t, std::deque<ConstructorInfo>> constructors;  // by type id; stable
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

const ActorTypeInfo* find_actor_type(uint64_t id) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.by_id.find(id);
  return it == r.by_id.end() ? nullptr : it->second;
}

const ConstructorInfo* find_constructor(const ActorTypeInfo& type, uint64_t signature) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.constructors.find(type.id);
  if (it == r.constructors.end()) return nullptr;
  for (const ConstructorInfo& c : it->second) {
    if (c.signature == signature) return &c;
  }
  return nullptr;
}

std::vector<std::string> constructor_signatures(const ActorTypeInfo& type) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<std::string> out;
  auto it = r.constructors.find(type.id);
  if (it == r.constructors.end()) return out;
  for (const ConstructorInfo& c : it->second)
    out.push_back(c.params);
  return out;
}

std::vector<std::string> registered_actor_types() {
  Registry& r = registry();
  std::vector<std::string> names;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    names.reserve(r.types.size());
    for (const auto& [name, info] : r.types)
      names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

namespace detail {

void mark_idempotent(const ActorTypeInfo& type, int index) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.types.find(type.name);
  if (it == r.types.end() || index < 0 ||
      static_cast<size_t>(index) >= it->second->methods.size()) {
    return;
  }
  it->second->methods[static_cast<size_t>(index)].idempotent = true;
}

const ActorTypeInfo& register_actor_type(ActorTypeInfo info) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto [it, inserted] = r.types.try_emplace(info.name, nullptr);
  if (inserted) {
    it->second = std::make_unique<ActorTypeInfo>(std::move(info));
    r.by_id.emplace(it->second->id, it->second.get());
  }
  return *it->second;
}

void register_constructor(const ActorTypeInfo& type, ConstructorInfo info) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto& list = r.constructors[type.id];
  for (const ConstructorInfo& c : list) {
    if (c.signature == info.signature) return;  // registered twice: keep the first
  }
  list.push_back(std::move(info));
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
