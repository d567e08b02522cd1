// TROUPE_ACTOR (actor_type.h) split in two, for an actor class whose header many files include:
//
//   // stage.h
//   TROUPE_ACTOR_DECLARE(Stage, &Stage::setup, &Stage::run_step);
//   // stage.cc, once
//   TROUPE_ACTOR_DEFINE(Stage);
//
//   // stage.h: the constructor other processes spawn it with
//   TROUPE_ACTOR_CONSTRUCTOR_DECLARE(Stage, StageOptions);
//   // stage.cc
//   TROUPE_ACTOR_CONSTRUCTOR_DEFINE(Stage, StageOptions);
//
// TROUPE_ACTOR builds the type's registry entry - an invoker per method, with the codecs of
// every argument and result - in each file that includes it, since the entry is an inline
// function there; for a class with many methods that is most of the time it takes to compile
// such a file. The pair builds it once, in the .cc that TROUPE_ACTOR_DEFINE is in, which
// registers the type when its library loads. Calls through ActorRef, the method list and
// TROUPE_ACTOR_CONSTRUCTOR / TROUPE_IDEMPOTENT work as with TROUPE_ACTOR.
#pragma once

#include <string_view>

#include "core/actor_type.h"

namespace troupe::detail {

// register_actor_class with the methods of a MethodList.
template <class T, auto... M>
const ActorTypeInfo& register_actor_list(std::string_view class_name, std::string_view method_list,
                                         MethodList<M...>) {
  return register_actor_class<T>(class_name, method_list, M...);
}

}  // namespace troupe::detail

#define TROUPE_ACTOR_DECLARE(Class, ...)                                \
  TROUPE_DETAIL_ACTOR_SIGNATURES(Class, __VA_ARGS__)                    \
  inline constexpr std::string_view troupe_actor_method_names(Class*) { \
    return #__VA_ARGS__;                                                \
  }                                                                     \
  const ::troupe::ActorTypeInfo& troupe_actor_type(Class*)

// In one .cc, in the class's namespace, after TROUPE_ACTOR_DECLARE is visible.
#define TROUPE_ACTOR_DEFINE(Class)                                                             \
  const ::troupe::ActorTypeInfo& troupe_actor_type(Class*) {                                   \
    static const ::troupe::ActorTypeInfo& info = ::troupe::detail::register_actor_list<Class>( \
        #Class, troupe_actor_method_names(static_cast<Class*>(nullptr)),                       \
        troupe_actor_methods(static_cast<Class*>(nullptr)));                                   \
    return info;                                                                               \
  }                                                                                            \
  [[maybe_unused]] static const bool troupe_actor_registered_##Class =                         \
      (troupe_actor_type(static_cast<Class*>(nullptr)), true)

// TROUPE_ACTOR_CONSTRUCTOR (core/detail/register_actor.h) in two the same way: the header says
// what spawn<Class>(options, args...) takes; one .cc registers it (its arguments' codecs).
#define TROUPE_ACTOR_CONSTRUCTOR_DECLARE(Class, ...)                                   \
  inline ::troupe::detail::ConstructorSignature<__VA_ARGS__> troupe_actor_constructor( \
      Class* __VA_OPT__(, ) __VA_ARGS__) {                                             \
    return {};                                                                         \
  }                                                                                    \
  static_assert(true)

#define TROUPE_ACTOR_CONSTRUCTOR_DEFINE(Class, ...)                                 \
  [[maybe_unused]] static const bool troupe_constructor_registered_##Class =        \
      (::troupe::detail::register_constructor(                                      \
           ::troupe::actor_type_of<Class>(),                                        \
           ::troupe::detail::make_constructor<Class __VA_OPT__(, ) __VA_ARGS__>()), \
       true)
