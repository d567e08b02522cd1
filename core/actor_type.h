// Actor types and their registration.
//
//   class Counter {
//    public:
//     int add(int n);
//     int get() const;
//   };
//   TROUPE_ACTOR(Counter, &Counter::add, &Counter::get);
//
// TROUPE_ACTOR names a class's callable methods. It must appear once, in the
// namespace of the class, with the class's unqualified name, after the class
// is complete. Each method gets a stable id, the hash of "Class::method", the
// same in every process; a worker that loads the class's library knows it by
// that id. Overloaded methods are not supported: give each a distinct name.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/detail/actor_behavior.h"
#include "core/detail/method_slots.h"
#include "core/ids.h"

namespace troupe {

class Reader;
class Writer;
namespace detail {
class ActorHandle;
}

// Sends the encoded result of a call back to its caller in another process.
using RemoteReply = std::function<void(Writer&)>;
// Runs a call that arrived from another process on the local actor `target`:
// decodes the arguments from `args`, sends the call, and when it completes
// gives `reply` the encoded result (no reply for a tell: `reply` is empty).
// Errors: the arguments did not decode, or the method cannot cross processes.
using RemoteInvoker =
    std::function<absl::Status(detail::ActorHandle& target, Reader& args, RemoteReply reply)>;

struct MethodInfo {
  std::string name;  // "Class::method"
  uint64_t id = 0;   // stable_id(name)
  RemoteInvoker invoke;
  // Marked with TROUPE_IDEMPOTENT: running it twice does what running it
  // once does, so a call lost with its actor's node may be sent again
  // (SpawnOptions::max_task_retries).
  bool idempotent = false;
};

// A constructor another process may spawn the actor with.
struct ConstructorInfo {
  uint64_t signature = 0;  // stable_id of the parameter type names
  std::string params;      // "(int32, string)", for errors
  // Decodes the arguments and returns the behavior that builds the actor.
  std::function<absl::StatusOr<detail::ActorBehavior>(Reader&)> make;
};

struct ActorTypeInfo {
  std::string name;  // "Class"
  uint64_t id = 0;   // stable_id(name)
  std::vector<MethodInfo> methods;

  const MethodInfo* method(uint64_t method_id) const {
    for (const MethodInfo& m : methods) {
      if (m.id == method_id) return &m;
    }
    return nullptr;
  }
};

// All actor types registered in this process, by name, or by id.
// Returns null if no such type was registered.
const ActorTypeInfo* find_actor_type(std::string_view name);
const ActorTypeInfo* find_actor_type(uint64_t id);
// The constructor of `type` with this signature (see ConstructorInfo), or null.
const ConstructorInfo* find_constructor(const ActorTypeInfo& type, uint64_t signature);
// Every constructor registered for `type`, for error messages.
std::vector<std::string> constructor_signatures(const ActorTypeInfo& type);
// The names of all actor types registered in this process, sorted.
std::vector<std::string> registered_actor_types();

namespace detail {

template <class M>
struct MethodTraits;

#define TROUPE_DETAIL_METHOD_TRAITS(CV, NOEXCEPT)   \
  template <class C, class R, class... P>           \
  struct MethodTraits<R (C::*)(P...) CV NOEXCEPT> { \
    using Class = C;                                \
    using Return = R;                               \
    using Params = std::tuple<P...>;                \
    static constexpr size_t kArity = sizeof...(P);  \
  };
TROUPE_DETAIL_METHOD_TRAITS(, )
TROUPE_DETAIL_METHOD_TRAITS(const, )
TROUPE_DETAIL_METHOD_TRAITS(, noexcept)
TROUPE_DETAIL_METHOD_TRAITS(const, noexcept)
#undef TROUPE_DETAIL_METHOD_TRAITS

// Per-class: the registered entry, for the names and ids of its methods
// (a call carries its method's index in the TROUPE_ACTOR list).
template <class T>
struct MethodTable {
  static inline const ActorTypeInfo* type = nullptr;
};

// Adds a type to the process-wide registry; returns the stored entry. A type
// registered twice under the same name keeps its first entry.
const ActorTypeInfo& register_actor_type(ActorTypeInfo info);

// Splits "&Counter::add, &Counter::get" into {"Counter::add", "Counter::get"}.
std::vector<std::string> parse_method_names(std::string_view list);

// Defined in core/detail/register_actor.h (included by core/actor.h): builds
// the type's entry, with cross-process invokers for its methods.
template <class T, class... M>
const ActorTypeInfo& register_actor_class(std::string_view class_name, std::string_view method_list,
                                          M... methods);

// Adds a remote constructor to a registered type. Internal.
void register_constructor(const ActorTypeInfo& type, ConstructorInfo info);

// Marks method `index` of a registered type idempotent. Internal.
void mark_idempotent(const ActorTypeInfo& type, int index);

}  // namespace detail

// True for classes registered with TROUPE_ACTOR.
template <class T>
concept RegisteredActor = requires(T* p) {
  { troupe_actor_type(p) } -> std::same_as<const ActorTypeInfo&>;
};

template <RegisteredActor T>
const ActorTypeInfo& actor_type_of() {
  return troupe_actor_type(static_cast<T*>(nullptr));
}

}  // namespace troupe

// What TROUPE_ACTOR and TROUPE_ACTOR_DECLARE (core/actor_declare.h) both say of a class: its
// method list and, when it has one, its default constructor.
#define TROUPE_DETAIL_ACTOR_SIGNATURES(Class, ...)                                                \
  inline constexpr ::troupe::detail::MethodList<__VA_ARGS__> troupe_actor_methods(Class*) {       \
    return {};                                                                                    \
  }                                                                                               \
  static_assert(::troupe::detail::MethodTypes<Class>::kSize <= ::troupe::detail::kMaxMethodTypes, \
                "TROUPE_ACTOR(" #Class                                                            \
                ", ...): its methods have more distinct signatures than an ActorRef "             \
                "has slots (detail::kMaxMethodTypes)");                                           \
  template <class C = Class>                                                                      \
  requires std::is_default_constructible_v<C>                                                     \
  inline ::troupe::detail::ConstructorSignature<> troupe_actor_constructor(Class*) {              \
    return {};                                                                                    \
  }

#define TROUPE_ACTOR(Class, ...)                                                          \
  TROUPE_DETAIL_ACTOR_SIGNATURES(Class, __VA_ARGS__)                                      \
  inline const ::troupe::ActorTypeInfo& troupe_actor_type(Class*) {                       \
    static const ::troupe::ActorTypeInfo& info =                                          \
        ::troupe::detail::register_actor_class<Class>(#Class, #__VA_ARGS__, __VA_ARGS__); \
    return info;                                                                          \
  }                                                                                       \
  [[maybe_unused]] inline const bool troupe_actor_registered_##Class =                    \
      (troupe_actor_type(static_cast<Class*>(nullptr)), true)
