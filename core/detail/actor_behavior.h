// Type-erased operations on a user's actor class. Internal to core.
#pragma once

#include <functional>

#include "core/spawn_options.h"

namespace troupe::detail {

struct ActorBehavior {
  std::function<void*()> create;  // may throw
  void (*destroy)(void*) = nullptr;
  void (*on_restart)(void*, const RestartInfo&) = nullptr;  // null if absent
};

// The behavior of T built from copies of `args` (kept for restarts).
template <class T, class... A>
ActorBehavior make_behavior(std::tuple<A...> args) {
  ActorBehavior behavior;
  behavior.create = [stored = std::move(args)]() {
    return static_cast<void*>(std::apply([](const auto&... a) { return new T(a...); }, stored));
  };
  behavior.destroy = [](void* p) { delete static_cast<T*>(p); };
  if constexpr (requires(T & t, const RestartInfo& info) { t.on_restart(info); }) {
    behavior.on_restart = [](void* p, const RestartInfo& info) {
      static_cast<T*>(p)->on_restart(info);
    };
  }
  return behavior;
}

}  // namespace troupe::detail
