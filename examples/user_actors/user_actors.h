// An actor library of a user's own, built apart from troupe against an
// installed troupe (CMakeLists.txt here) and loaded by workers at run time
// (docs/cluster.md, "User actor libraries").
//
// TROUPE_ACTOR sits in the header: code that calls the actor needs it for
// &KeyValueShard::put and friends. The library itself registers the type when
// it loads, from user_actors.cc.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "core/actor.h"

namespace user_actors {

// One shard of a string key-value store.
class KeyValueShard {
 public:
  KeyValueShard() = default;
  explicit KeyValueShard(std::string name) : name_(std::move(name)) {}

  // Stores `value` under `key`; true if the key is new.
  bool put(std::string key, std::string value);
  // The value under `key`, if any.
  std::optional<std::string> get(std::string key) const;
  // The number of keys held.
  int64_t size() const;
  // The name the shard was spawned with ("" for the default constructor).
  std::string name() const { return name_; }

 private:
  std::string name_;
  std::map<std::string, std::string> entries_;
};
TROUPE_ACTOR(KeyValueShard, &KeyValueShard::put, &KeyValueShard::get, &KeyValueShard::size,
             &KeyValueShard::name);

}  // namespace user_actors
