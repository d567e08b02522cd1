// Compile-time method checks for ActorRef<T>::call and tell: a method that
// TROUPE_ACTOR(T, ...) does not list does not compile, and its position in
// that list (the index calls are sent with) is found by the compiler.
//
// TROUPE_ACTOR declares troupe_actor_methods(T*), whose return type lists
// the methods: MethodList<&T::a, &T::b>. A method pointer is a value, and a
// function parameter is never a constant, so the check happens in the
// conversion of the call's first argument: ActorRef<T> has one call()
// overload per slot I, taking MethodSlot<T, I>, and slot I accepts the I-th
// distinct method type of the list through a consteval constructor, which
// finds the pointer in the list or fails to compile. The overloads exist
// before T is complete (ActorRef<T> may be a member of T); a slot looks at
// the list only when a call is compiled. Internal to core.
#pragma once

#include <cstddef>
#include <tuple>
#include <type_traits>

namespace troupe::detail {

template <auto... M>
struct MethodList {};

// At most this many distinct method types (signatures) per actor class.
inline constexpr size_t kMaxMethodTypes = 32;

// The methods TROUPE_ACTOR listed for T (found by argument-dependent lookup).
template <class T>
using MethodsOf = decltype(troupe_actor_methods(static_cast<T*>(nullptr)));

template <class... Ts>
struct TypeList {
  static constexpr size_t kSize = sizeof...(Ts);
};

template <class List, class U>
struct AppendNew;
template <class... Ts, class U>
struct AppendNew<TypeList<Ts...>, U> {
  using type =
      std::conditional_t<(std::is_same_v<Ts, U> || ...), TypeList<Ts...>, TypeList<Ts..., U>>;
};

template <class List, auto... M>
struct DistinctTypes {
  using type = List;
};
template <class List, auto M0, auto... M>
struct DistinctTypes<List, M0, M...>
    : DistinctTypes<typename AppendNew<List, decltype(M0)>::type, M...> {};

template <class Methods>
struct MethodTypesOfList;
template <auto... M>
struct MethodTypesOfList<MethodList<M...>> {
  using type = typename DistinctTypes<TypeList<>, M...>::type;
};

// The distinct types of T's listed methods, in order of first appearance.
template <class T>
using MethodTypes = typename MethodTypesOfList<MethodsOf<T>>::type;

template <size_t I, class List>
struct TypeAt {
  using type = void;  // past the end
};
template <size_t I, class... Ts>
requires(I < sizeof...(Ts)) struct TypeAt<I, TypeList<Ts...>> {
  using type = std::tuple_element_t<I, std::tuple<Ts...>>;
};

// Where `m` is in the list, or -1.
template <class M, auto... Listed>
consteval int index_in(M m, MethodList<Listed...>) {
  int index = -1;
  int i = 0;
  (
      [&] {
        if constexpr (std::is_same_v<M, decltype(Listed)>) {
          if (index < 0 && m == Listed) index = i;
        }
        ++i;
      }(),
      ...);
  return index;
}

// The parameter types of a constructor registered with
// TROUPE_ACTOR_CONSTRUCTOR, as the return type of the troupe_actor_constructor
// overload it declares: overload resolution over those picks the
// constructor a Cluster::spawn's arguments convert to, as a C++ call would.
template <class... P>
struct ConstructorSignature {};

// Not constexpr: reaching it in a consteval constructor is the compile
// error that names the mistake.
inline void method_is_not_listed_in_TROUPE_ACTOR() {}

// Accepts the I-th distinct method type of T's list, when there is one, and
// only pointers that the list holds.
template <class T, size_t I>
struct MethodSlot {
  using Method = typename TypeAt<I, MethodTypes<T>>::type;
  static constexpr bool kUsed = !std::is_void_v<Method>;

  template <class M>
  requires(kUsed&& std::is_same_v<M, Method>) consteval MethodSlot(M m)
      : method(m), index(index_in(m, MethodsOf<T>{})) {
    if (index < 0) method_is_not_listed_in_TROUPE_ACTOR();
  }

  std::conditional_t<kUsed, Method, int> method;
  int index;
};

}  // namespace troupe::detail
