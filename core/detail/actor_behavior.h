// Type-erased operations on a user's actor class. Internal to core.
#pragma once

#include <concepts>
#include <functional>
#include <memory>
#include <tuple>

#include "absl/status/statusor.h"
#include "core/spawn_options.h"

namespace troupe::detail {

struct ActorBehavior {
  // A new instance, or why there is none (a factory's error). A constructor
  // may also throw; the callers turn that into an error too.
  std::function<absl::StatusOr<void*>()> create;
  void (*destroy)(void*) = nullptr;
  void (*on_restart)(void*, const RestartInfo&) = nullptr;  // null if absent
};

// T has a factory for these arguments: static StatusOr<unique_ptr<T>> create(...).
template <class T, class... A>
concept HasActorFactory = requires(const A&... a) {
  { T::create(a...) } -> std::same_as<absl::StatusOr<std::unique_ptr<T>>>;
};

// The behavior of T built from copies of `args` (kept for restarts): through
// T::create when T has that factory, else T's constructor.
template <class T, class... A>
ActorBehavior make_behavior(std::tuple<A...> args) {
  ActorBehavior behavior;
  behavior.create = [stored = std::move(args)]() -> absl::StatusOr<void*> {
    if constexpr (HasActorFactory<T, A...>) {
      absl::StatusOr<std::unique_ptr<T>> made =
          std::apply([](const auto&... a) { return T::create(a...); }, stored);
      if (!made.ok()) return made.status();
      return static_cast<void*>(made->release());
    } else {
      return static_cast<void*>(std::apply([](const auto&... a) { return new T(a...); }, stored));
    }
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
