// ActorRef<T>: a typed, copyable handle to an actor.
//
//   absl::StatusOr<ActorRef<Counter>> counter = system.spawn<Counter>(SpawnOptions{});
//   Future<int> sum = counter->call(&Counter::add, 5);   // request-reply
//   counter->tell(&Counter::add, 1);                     // fire-and-forget
//
// Messages from one sender arrive in the order they were sent. A call of a
// method that TROUPE_ACTOR does not list, or whose arguments do not convert
// to the method's parameters as a C++ call's would, does not compile.
// Methods take parameters by value or const reference (never a mutable
// reference: the actor runs on another thread). A method may return void, a
// value, absl::Status, absl::StatusOr<U> or Future<U>; call() returns the
// matching Future. If the actor is gone, or dies while running the call, the
// future fails with ActorDied and the reason.
//
// An ActorRef is itself a value a call can carry: pass one to a constructor
// or a method, or return one, and it is callable where it lands - in this
// process, or on another node of the cluster (Ray's actor handles).
#pragma once

#include <tuple>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/actor_type.h"
#include "core/codec.h"
#include "core/detail/actor_handle.h"
#include "core/detail/actor_resolver.h"
#include "core/detail/call_message.h"
#include "core/detail/method_slots.h"
#include "core/detail/ref_counted.h"
#include "core/future.h"
#include "core/ids.h"

namespace troupe {

class ActorSystem;

namespace detail {

template <class P, class A>
constexpr bool kPassable = std::is_convertible_v<A, std::decay_t<P>> &&
                           (!std::is_lvalue_reference_v<P> ||
                            std::is_const_v<std::remove_reference_t<P>>);

template <class Params, class Args, class = void>
struct ArgsMatch : std::false_type {};
template <class... P, class... A>
struct ArgsMatch<std::tuple<P...>, std::tuple<A...>, std::enable_if_t<sizeof...(P) == sizeof...(A)>>
    : std::bool_constant<(kPassable<P, A> && ...)> {};

template <class T, class M, class... A>
concept CallableWith =
    std::is_member_function_pointer_v<M> && std::is_base_of_v<typename MethodTraits<M>::Class, T> &&
    ArgsMatch<typename MethodTraits<M>::Params, std::tuple<A...>>::value;

// Slot I of T takes a listed method whose parameters `A...` convert to.
template <class T, size_t I, class... A>
concept SlotCallable =
    MethodSlot<T, I>::kUsed && CallableWith<T, typename MethodSlot<T, I>::Method, A...>;

template <class Params>
struct Decayed;
template <class... P>
struct Decayed<std::tuple<P...>> {
  using type = std::tuple<std::decay_t<P>...>;
  template <class T, class M, class U>
  using Call = detail::Call<T, M, U, std::decay_t<P>...>;
  template <class T, class M>
  using Tell = detail::Tell<T, M, std::decay_t<P>...>;
};

// Sends a call of `method` (index `index` in T's TROUPE_ACTOR list) to `cell`.
template <class T, class M, class... A>
auto send_call(ActorHandle* cell, M method, int index, A&&... args)
    -> Future<unwrap_t<typename MethodTraits<M>::Return>> {
  using Traits = MethodTraits<M>;
  using U = unwrap_t<typename Traits::Return>;
  using Params = Decayed<typename Traits::Params>;
  using CallMessage = typename Params::template Call<T, M, U>;
  if (cell == nullptr) {
    return Future<U>::failed(absl::FailedPreconditionError("call on an invalid ActorRef"));
  }
  auto* message = new CallMessage(method, index, typename Params::type(std::forward<A>(args)...));
  Future<U> result(IntrusivePtr<FutureState<U>>::share(message));
  cell->send(message);
  return result;
}

// Sends a one-way message of `method` to `cell` (dropped if there is none).
template <class T, class M, class... A>
void send_tell(ActorHandle* cell, M method, int index, A&&... args) {
  using Params = Decayed<typename MethodTraits<M>::Params>;
  using TellMessage = typename Params::template Tell<T, M>;
  if (cell == nullptr) return;
  cell->send(new TellMessage(method, index, typename Params::type(std::forward<A>(args)...)));
}

// ActorRef<T>'s call() and tell() overloads, one pair per method slot.
template <class T, size_t I>
class CallSlots : public CallSlots<T, I + 1> {
 public:
  using CallSlots<T, I + 1>::call;
  using CallSlots<T, I + 1>::tell;

  template <class... A>
  requires SlotCallable<T, I, A...>
  auto call(MethodSlot<T, I> method, A&&... args) const {
    return send_call<T>(this->cell(), method.method, method.index, std::forward<A>(args)...);
  }
  template <class... A>
  requires SlotCallable<T, I, A...>
  void tell(MethodSlot<T, I> method, A&&... args) const {
    send_tell<T>(this->cell(), method.method, method.index, std::forward<A>(args)...);
  }
};

template <class T>
class CallSlots<T, kMaxMethodTypes> {
 protected:
  ActorHandle* cell() const { return cell_.get(); }
  IntrusivePtr<ActorHandle> cell_;

  // Never viable: the overloads above bring these in by name.
  struct NoMethod {
    NoMethod() = delete;
  };
  void call(NoMethod) const = delete;
  void tell(NoMethod) const = delete;
};

}  // namespace detail

template <class T>
class ActorRef : public detail::CallSlots<T, 0> {
 public:
  // An invalid reference; call() on it fails with FailedPrecondition, tell()
  // does nothing.
  ActorRef() = default;

  // Wraps a handle (a local cell or a remote proxy). Internal.
  static ActorRef from_handle(detail::IntrusivePtr<detail::ActorHandle> handle) {
    return ActorRef(std::move(handle));
  }
  detail::ActorHandle* handle() const { return this->cell_.get(); }

  bool valid() const { return static_cast<bool>(this->cell_); }
  ActorId id() const { return this->cell_ ? this->cell_->id() : ActorId{}; }

  // call(&T::method, args...): sends a request; the future completes with
  // the method's result. Blocks while the actor's mailbox is full
  // (back-pressure).
  // tell(&T::method, args...): sends a one-way message. Blocks while the
  // mailbox is full. Errors are dropped; use call() to learn of them.
  // (Both are the overloads of detail::CallSlots: only methods listed in
  // TROUPE_ACTOR compile.)
  using detail::CallSlots<T, 0>::call;
  using detail::CallSlots<T, 0>::tell;

  friend bool operator==(const ActorRef& a, const ActorRef& b) {
    return a.cell_.get() == b.cell_.get();
  }

 private:
  friend class ActorSystem;
  explicit ActorRef(detail::IntrusivePtr<detail::ActorHandle> cell) {
    this->cell_ = std::move(cell);
  }
};

// An ActorRef crosses processes as its actor's id, type and node; the node
// that reads it turns that back into a handle (core/detail/actor_resolver.h).
template <class T>
struct Codec<ActorRef<T>> {
  static constexpr size_t min_bytes() { return 8 + 8 + 4; }
  static std::string name() { return absl::StrCat("ActorRef<", actor_type_of<T>().name, ">"); }

  static void encode(Writer& w, const ActorRef<T>& ref) {
    uint32_t node = 0;
    if (ref.valid()) {
      if (w.actor_resolver() == nullptr) {
        w.fail(absl::StrCat("an ActorRef<", actor_type_of<T>().name,
                            "> can cross processes only from a cluster node"));
      } else {
        node = w.actor_resolver()->location_of(*ref.handle());
      }
    }
    w.write(ref.id().value);
    w.write(actor_type_of<T>().id);
    w.write(node);
  }

  static bool decode(Reader& r, ActorRef<T>& out) {
    uint64_t id = 0;
    uint64_t type = 0;
    uint32_t node = 0;
    if (!r.read(id) || !r.read(type) || !r.read(node)) return false;
    const ActorTypeInfo& expected = actor_type_of<T>();
    if (type != expected.id) {
      const ActorTypeInfo* sent = find_actor_type(type);
      return r.fail(absl::StrCat("an ActorRef<", sent ? sent->name : "?", "> where an ActorRef<",
                                 expected.name, "> was expected"));
    }
    if (id == 0) {
      out = ActorRef<T>();
      return true;
    }
    if (r.actor_resolver() == nullptr) {
      return r.fail(
          absl::StrCat("an ActorRef<", expected.name, "> can be read only on a cluster node"));
    }
    out = ActorRef<T>::from_handle(r.actor_resolver()->resolve(ActorId{id}, expected, node));
    return true;
  }
};

}  // namespace troupe
