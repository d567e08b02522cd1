#include "user_actors.h"

#include <utility>

namespace user_actors {

bool KeyValueShard::put(std::string key, std::string value) {
  return entries_.insert_or_assign(std::move(key), std::move(value)).second;
}

std::optional<std::string> KeyValueShard::get(std::string key) const {
  auto it = entries_.find(key);
  if (it == entries_.end()) return std::nullopt;
  return it->second;
}

int64_t KeyValueShard::size() const {
  return static_cast<int64_t>(entries_.size());
}

}  // namespace user_actors
