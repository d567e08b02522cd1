// What TROUPE_ACTOR and TROUPE_ACTOR_CONSTRUCTOR expand to: the type's entry
// in the registry, with what another process needs to run it - an invoker
// per method and the constructors it may be spawned with. Internal to core;
// included by core/actor.h.
#pragma once

#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>

#include "core/actor_ref.h"
#include "core/actor_type.h"
#include "core/codec.h"
#include "core/detail/actor_behavior.h"
#include "core/detail/remote_codec.h"

namespace troupe::detail {

template <class Params>
struct ParamPack;
template <class... P>
struct ParamPack<std::tuple<P...>> {
  using Values = std::tuple<std::decay_t<P>...>;
  static constexpr bool kCodable = kArgsCodable<std::decay_t<P>...>;
};

// Runs `method` of T for a caller in another process.
template <class T, class M>
RemoteInvoker make_invoker(M method, int index, std::string name) {
  using Traits = MethodTraits<M>;
  using Pack = ParamPack<typename Traits::Params>;
  using U = unwrap_t<typename Traits::Return>;
  if constexpr (!Pack::kCodable || !kResultCodable<U>) {
    return [name](ActorHandle&, Reader&, RemoteReply) {
      return absl::UnimplementedError(absl::StrCat(
          name, " cannot be called from another process: a parameter or the result has no Codec"));
    };
  } else {
    return [method, index](ActorHandle& target, Reader& in, RemoteReply reply) -> absl::Status {
      typename Pack::Values args;
      absl::Status decoded = std::apply([&](auto&... a) { return decode_values(in, a...); }, args);
      if (!decoded.ok()) return decoded;
      if (!reply) {
        std::apply([&](auto&... a) { send_tell<T>(&target, method, index, std::move(a)...); },
                   args);
        return absl::OkStatus();
      }
      Future<U> result = std::apply(
          [&](auto&... a) { return send_call<T>(&target, method, index, std::move(a)...); }, args);
      ActorResolver* actors = in.actor_resolver();
      static_cast<void>(std::move(result).then([reply = std::move(reply), actors](Result<U> r) {
        Writer out;
        out.set_actor_resolver(actors);
        encode_result<U>(out, std::move(r));
        if (!out.ok()) {  // the result cannot cross: the caller learns why
          Writer error;
          error.write(out.status());
          reply(error);
          return;
        }
        reply(out);
      }));
      return absl::OkStatus();
    };
  }
}

// Lets another process spawn T with arguments of types A... .
template <class T, class... A>
ConstructorInfo make_constructor() {
  static_assert(kArgsCodable<A...>, "every constructor parameter type needs a Codec");
  ConstructorInfo info;
  info.params = arg_type_names<A...>();
  info.signature = stable_id(info.params);
  info.make = [](Reader& in) -> absl::StatusOr<ActorBehavior> {
    std::tuple<A...> args;
    absl::Status decoded = std::apply([&](auto&... a) { return decode_values(in, a...); }, args);
    if (!decoded.ok()) return decoded;
    return make_behavior<T>(std::move(args));
  };
  return info;
}

template <class T, class... M>
const ActorTypeInfo& register_actor_class(std::string_view class_name, std::string_view method_list,
                                          M... methods) {
  static_assert((std::is_member_function_pointer_v<M> && ...),
                "TROUPE_ACTOR takes member function pointers: &Class::method");
  static_assert((std::is_base_of_v<typename MethodTraits<M>::Class, T> && ...),
                "TROUPE_ACTOR lists a method of another class");
  ActorTypeInfo info;
  info.name = std::string(class_name);
  info.id = stable_id(class_name);
  std::vector<std::string> names = parse_method_names(method_list);
  int i = 0;
  ((info.methods.push_back(MethodInfo{names[static_cast<size_t>(i)],
                                      stable_id(names[static_cast<size_t>(i)]),
                                      make_invoker<T>(methods, i, names[static_cast<size_t>(i)])}),
    ++i),
   ...);
  const ActorTypeInfo& stored = register_actor_type(std::move(info));
  MethodTable<T>::type = &stored;
  if constexpr (std::is_default_constructible_v<T>) {
    register_constructor(stored, make_constructor<T>());
  }
  return stored;
}

// The registered constructor of T that arguments of types A... convert to,
// chosen by overload resolution as a C++ constructor call would be.
template <class T, class... A>
concept HasRemoteConstructor = requires {
  troupe_actor_constructor(static_cast<T*>(nullptr), std::declval<A>()...);
};
template <class T, class... A>
using RemoteConstructorFor =
    decltype(troupe_actor_constructor(static_cast<T*>(nullptr), std::declval<A>()...));

// The id the spawned side finds a constructor taking P... by (make_constructor's).
template <class... P>
uint64_t constructor_signature() {
  return stable_id(arg_type_names<std::decay_t<P>...>());
}
template <class... P>
uint64_t signature_id(ConstructorSignature<P...>) {
  return constructor_signature<P...>();
}

template <class P>
P implicitly(P p) {
  return p;
}

// Encodes `args` as the constructor's parameter types, each converted
// implicitly (a double to a float, a string literal to a std::string).
template <class... P, class... A>
void encode_constructor_args(Writer& w, ConstructorSignature<P...>, A&&... args) {
  encode_values(w, implicitly<P>(std::forward<A>(args))...);
}

// TROUPE_IDEMPOTENT's checks and registration.
template <class T, auto... M>
consteval bool all_listed() {
  return ((index_in(M, MethodsOf<T>{}) >= 0) && ...);
}
template <class T, auto... M>
bool mark_idempotent_methods() {
  (mark_idempotent(actor_type_of<T>(), index_in(M, MethodsOf<T>{})), ...);
  return true;
}

}  // namespace troupe::detail

// Lets other processes spawn Class with these constructor parameter types
// (TROUPE_ACTOR already allows the default constructor). Place it after
// TROUPE_ACTOR, at namespace scope (Class unqualified, in its namespace);
// repeat for each constructor.
//   TROUPE_ACTOR_CONSTRUCTOR(Counter, int, std::string);
#define TROUPE_ACTOR_CONSTRUCTOR(Class, ...)                                             \
  inline ::troupe::detail::ConstructorSignature<__VA_ARGS__> troupe_actor_constructor(   \
      Class* __VA_OPT__(, ) __VA_ARGS__) {                                               \
    return {};                                                                           \
  }                                                                                      \
  [[maybe_unused]] inline const bool TROUPE_DETAIL_CONCAT(troupe_constructor_##Class##_, \
                                                          __LINE__) =                    \
      (::troupe::detail::register_constructor(                                           \
           ::troupe::actor_type_of<Class>(),                                             \
           ::troupe::detail::make_constructor<Class __VA_OPT__(, ) __VA_ARGS__>()),      \
       true)
#define TROUPE_DETAIL_CONCAT_INNER(a, b) a##b
#define TROUPE_DETAIL_CONCAT(a, b) TROUPE_DETAIL_CONCAT_INNER(a, b)

// Marks methods of a class registered with TROUPE_ACTOR idempotent - running
// one twice does what running it once does - so that a call in flight when
// its actor's node is lost is sent again to the restarted actor, up to the
// actor's SpawnOptions::max_task_retries (Ray's max_task_retries: at least
// once, for these methods only). After TROUPE_ACTOR, at namespace scope:
//   TROUPE_IDEMPOTENT(Shard, &Shard::weights, &Shard::size);
#define TROUPE_IDEMPOTENT(Class, ...)                                                            \
  static_assert(::troupe::detail::all_listed<Class, __VA_ARGS__>(),                              \
                "TROUPE_IDEMPOTENT(" #Class ", ...) names a method TROUPE_ACTOR does not list"); \
  [[maybe_unused]] inline const bool TROUPE_DETAIL_CONCAT(troupe_idempotent_, __LINE__) =        \
      ::troupe::detail::mark_idempotent_methods<Class, __VA_ARGS__>()
