// An actor library of a user's own, built apart from troupe against an
// installed troupe (CMakeLists.txt here) and loaded by workers at run time
// (docs/cluster.md, "User actor libraries").
//
// TROUPE_ACTOR and TROUPE_ACTOR_CONSTRUCTOR sit in the header: code that calls
// the actor needs the method list for &KeyValueShard::put and friends (a
// method not listed does not compile), and code that spawns it needs the
// constructors (its arguments convert to theirs). The library registers the
// type when it loads.
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
// Other processes spawn a named shard: spawn<KeyValueShard>(options, name).
// (TROUPE_ACTOR already allows the default constructor.)
TROUPE_ACTOR_CONSTRUCTOR(KeyValueShard, std::string);

}  // namespace user_actors
