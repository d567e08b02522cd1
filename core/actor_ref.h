// ActorRef<T>: a typed, copyable handle to an actor.
//
//   absl::StatusOr<ActorRef<Counter>> counter = system.spawn<Counter>(SpawnOptions{});
//   Future<int> sum = counter->call(&Counter::add, 5);   // request-reply
//   counter->tell(&Counter::add, 1);                     // fire-and-forget
//
// Messages from one sender arrive in the order they were sent. A call whose
// arguments do not convert to the method's parameters does not compile.
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

}  // namespace detail

template <class T>
class ActorRef {
 public:
  // An invalid reference; call() and tell() on it fail.
  ActorRef() = default;

  // Wraps a handle (a local cell or a remote proxy). Internal.
  static ActorRef from_handle(detail::IntrusivePtr<detail::ActorHandle> handle) {
    return ActorRef(std::move(handle));
  }
  detail::ActorHandle* handle() const { return cell_.get(); }

  bool valid() const { return static_cast<bool>(cell_); }
  ActorId id() const { return cell_ ? cell_->id() : ActorId{}; }

  // Sends a request; the future completes with the method's result. Blocks
  // while the actor's mailbox is full (back-pressure).
  template <class M, class... A>
  requires detail::CallableWith<T, M, A...>
  auto call(M method, A&&... args) const
      -> Future<detail::unwrap_t<typename detail::MethodTraits<M>::Return>> {
    using Traits = detail::MethodTraits<M>;
    using U = detail::unwrap_t<typename Traits::Return>;
    using Params = detail::Decayed<typename Traits::Params>;
    using CallMessage = typename Params::template Call<T, M, U>;
    int index = detail::MethodTable<T>::index_of(method);
    if (absl::Status s = check(index); !s.ok()) return Future<U>::failed(std::move(s));
    auto* message = new CallMessage(method, index, typename Params::type(std::forward<A>(args)...));
    Future<U> result(detail::IntrusivePtr<detail::FutureState<U>>::share(message));
    cell_->send(message);
    return result;
  }

  // Sends a one-way message. Blocks while the mailbox is full. Errors are
  // dropped; use call() to learn of them.
  template <class M, class... A>
  requires detail::CallableWith<T, M, A...>
  void tell(M method, A&&... args) const {
    using Traits = detail::MethodTraits<M>;
    using Params = detail::Decayed<typename Traits::Params>;
    using TellMessage = typename Params::template Tell<T, M>;
    int index = detail::MethodTable<T>::index_of(method);
    if (!check(index).ok()) return;
    cell_->send(new TellMessage(method, index, typename Params::type(std::forward<A>(args)...)));
  }

  friend bool operator==(const ActorRef& a, const ActorRef& b) {
    return a.cell_.get() == b.cell_.get();
  }

 private:
  friend class ActorSystem;
  explicit ActorRef(detail::IntrusivePtr<detail::ActorHandle> cell) : cell_(std::move(cell)) {}

  absl::Status check(int method_index) const {
    if (!cell_) return absl::FailedPreconditionError("call on an invalid ActorRef");
    if (method_index < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("method is not listed in TROUPE_ACTOR(", actor_type_of<T>().name, ", ...)"));
    }
    return absl::OkStatus();
  }

  detail::IntrusivePtr<detail::ActorHandle> cell_;
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
