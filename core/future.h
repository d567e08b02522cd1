// Future<T> and Promise<T>: the results of actor calls.
//
// A Future is move-only and has a single consumer: get() (blocking, with an
// optional deadline) or then() (a continuation). Errors are values: get()
// returns absl::StatusOr<T> (absl::Status for Future<void>).
//
// Continuations attached with then() inside an actor run in that actor's
// context, serialised with its messages, so they may touch its state freely.
// Attached anywhere else they run on the thread that completes the future.
//
//   Future<int> f = counter.call(&Counter::add, 5);
//   Future<std::string> g = std::move(f).then([](int v) { return std::to_string(v); });
//   absl::StatusOr<std::string> s = g.get(absl::Seconds(1));
#pragma once

#include <exception>
#include <string>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/detail/future_state.h"
#include "core/detail/message.h"
#include "core/detail/ref_counted.h"

namespace troupe {

template <class T>
class Future;
template <class T>
class Promise;

// What get() returns: absl::StatusOr<T>, or absl::Status for void.
template <class T>
using Result = std::conditional_t<std::is_void_v<T>, absl::Status, absl::StatusOr<T>>;

namespace detail {

template <class T>
Result<T> to_result(absl::StatusOr<Stored<T>>&& v) {
  if constexpr (std::is_void_v<T>) {
    return v.status();
  } else {
    return std::move(v);
  }
}

template <class T>
absl::StatusOr<Stored<T>> from_result(Result<T>&& r) {
  if constexpr (std::is_void_v<T>) {
    if (r.ok()) return Unit{};
    return r;
  } else {
    return std::move(r);
  }
}

// The value type a callable's return type R produces once unwrapped:
// void and absl::Status give void; StatusOr<X> and Future<X> give X.
template <class R>
struct Unwrap {
  using type = R;
};
template <>
struct Unwrap<absl::Status> {
  using type = void;
};
template <class X>
struct Unwrap<absl::StatusOr<X>> {
  using type = X;
};
template <class X>
struct Unwrap<Future<X>> {
  using type = X;
};
template <class R>
using unwrap_t = typename Unwrap<R>::type;

template <class T>
IntrusivePtr<FutureState<T>>& state_of(Future<T>& f) {
  return f.state_;
}

// Completes `dst` with the value of `src` when `src` becomes ready.
template <class T>
class Forward final : public Continuation {
 public:
  Forward(IntrusivePtr<FutureState<T>> src, IntrusivePtr<FutureState<T>> dst)
      : src_(std::move(src)), dst_(std::move(dst)) {}
  void on_ready() override {
    dst_->set(src_->take());
    delete this;
  }

 private:
  IntrusivePtr<FutureState<T>> src_;
  IntrusivePtr<FutureState<T>> dst_;
};

// Invokes f(args...) and completes `dst` with its unwrapped result.
// REQUIRES: the caller holds a reference to dst. Exceptions from f propagate
// and leave dst untouched.
template <class U, class F, class... A>
void complete_with(FutureState<U>* dst, F& f, A&&... args) {
  using R = std::invoke_result_t<F&, A...>;
  if constexpr (std::is_void_v<R>) {
    std::invoke(f, std::forward<A>(args)...);
    dst->set(Unit{});
  } else if constexpr (std::is_same_v<R, absl::Status>) {
    absl::Status s = std::invoke(f, std::forward<A>(args)...);
    if (s.ok()) {
      dst->set(Unit{});
    } else {
      dst->set(std::move(s));
    }
  } else if constexpr (std::is_same_v<R, Future<U>>) {
    Future<U> inner = std::invoke(f, std::forward<A>(args)...);
    auto& src = state_of(inner);
    if (!src) {
      dst->set(absl::FailedPreconditionError("continuation returned an empty future"));
      return;
    }
    FutureState<U>* raw = src.get();
    raw->attach(new Forward<U>(std::move(src), IntrusivePtr<FutureState<U>>::share(dst)));
  } else {
    dst->set(std::invoke(f, std::forward<A>(args)...));
  }
}

// The state of then(f)'s result, which is also the continuation of the source
// and, inside an actor, the message that runs f in that actor's context.
// References: one for the result Future, one held while f is pending.
template <class T, class F, class U>
class Then final : public FutureState<U>, public Continuation, public Message {
 public:
  Then(IntrusivePtr<FutureState<T>> src, F f, IntrusivePtr<MessageTarget> target)
      : src_(std::move(src)), f_(std::move(f)), target_(std::move(target)) {}

  void on_ready() override {
    if (target_) {
      target_->post_internal(this);
      return;
    }
    try {
      run();
    } catch (const std::exception& e) {
      reject(absl::InternalError(std::string("continuation threw: ") + e.what()));
    } catch (...) {
      reject(absl::InternalError("continuation threw a non-std exception"));
    }
  }
  void deliver(void*) override { run(); }
  void reject(const absl::Status& why) override {
    src_ = nullptr;
    this->set(why);
    this->release();
  }

 private:
  static constexpr bool kTakesResult = std::is_invocable_v<F&, Result<T>>;

  void run() {
    absl::StatusOr<Stored<T>> v = src_->take();
    src_ = nullptr;
    if constexpr (kTakesResult) {
      complete_with<U>(this, f_, to_result<T>(std::move(v)));
    } else if (!v.ok()) {
      this->set(v.status());
    } else if constexpr (std::is_void_v<T>) {
      complete_with<U>(this, f_);
    } else {
      complete_with<U>(this, f_, std::move(*v));
    }
    this->release();
  }

  IntrusivePtr<FutureState<T>> src_;
  F f_;
  IntrusivePtr<MessageTarget> target_;
};

template <class T, class F>
struct ThenResult {
  static constexpr bool kTakesResult = std::is_invocable_v<F&, Result<T>>;
  template <bool B, class = void>
  struct Pick {
    using type = std::invoke_result_t<F&, Result<T>>;
  };
  template <class D>
  struct Pick<false, D> {
    using type = typename std::conditional_t<std::is_void_v<T>, std::invoke_result<F&>,
                                             std::invoke_result<F&, Stored<T>&&>>::type;
  };
  using type = unwrap_t<typename Pick<kTakesResult>::type>;
};

}  // namespace detail

template <class T>
class [[nodiscard]] Future {
 public:
  using value_type = T;

  Future() = default;
  Future(Future&&) noexcept = default;
  Future& operator=(Future&&) noexcept = default;

  // False for a default-constructed, moved-from or consumed future.
  bool valid() const { return state_ != nullptr; }
  // True once a value or error is available; get() will not block.
  bool ready() const { return state_ && state_->ready(); }

  // Waits without a deadline and consumes the result.
  Result<T> get() { return get_until(absl::InfiniteFuture()); }
  // Waits at most `timeout`. On DeadlineExceeded the future stays valid and
  // get() may be called again; otherwise the result is consumed.
  Result<T> get(absl::Duration timeout) { return get_until(absl::Now() + timeout); }
  Result<T> get_until(absl::Time deadline) {
    if (!state_) return absl::FailedPreconditionError("get() on an empty or consumed future");
    if (!state_->ready() && !state_->wait(deadline)) {
      return absl::DeadlineExceededError("future not ready by its deadline");
    }
    auto v = state_->take();
    state_ = nullptr;
    return detail::to_result<T>(std::move(v));
  }

  // Chains `f` after this future and consumes it. `f` takes either the
  // Result<T> (and sees errors) or the plain value (and is skipped on error,
  // which passes through). It may return void, a value, absl::Status,
  // absl::StatusOr<U> or Future<U>; the returned future carries the unwrapped
  // value. Inside an actor, `f` runs in that actor's context; if `f` throws
  // there the actor fails, as when a method throws.
  template <class F>
  auto then(F f) && -> Future<typename detail::ThenResult<T, std::decay_t<F>>::type> {
    using U = typename detail::ThenResult<T, std::decay_t<F>>::type;
    using ThenState = detail::Then<T, std::decay_t<F>, U>;
    if (!state_)
      return Future<U>::failed(absl::FailedPreconditionError("then() on an empty future"));
    detail::MessageTarget* actor = detail::current_actor();
    auto target = actor ? detail::IntrusivePtr<detail::MessageTarget>::share(actor)
                        : detail::IntrusivePtr<detail::MessageTarget>();
    detail::FutureState<T>* src = state_.get();
    auto* c = new ThenState(std::move(state_), std::move(f), std::move(target));
    Future<U> result(detail::IntrusivePtr<detail::FutureState<U>>::share(c));
    src->attach(c);
    return result;
  }

  static Future ready_with(Result<T> r) {
    auto s = detail::IntrusivePtr<detail::FutureState<T>>::adopt(new detail::FutureState<T>);
    s->set(detail::from_result<T>(std::move(r)));
    return Future(std::move(s));
  }
  static Future failed(absl::Status why) {
    auto s = detail::IntrusivePtr<detail::FutureState<T>>::adopt(new detail::FutureState<T>);
    s->set(std::move(why));
    return Future(std::move(s));
  }

  // For runtime internals: wraps an existing state.
  explicit Future(detail::IntrusivePtr<detail::FutureState<T>> s) : state_(std::move(s)) {}

 private:
  friend detail::IntrusivePtr<detail::FutureState<T>>& detail::state_of<T>(Future<T>&);
  detail::IntrusivePtr<detail::FutureState<T>> state_;
};

template <class T>
Future<std::decay_t<T>> make_ready_future(T&& value) {
  return Future<std::decay_t<T>>::ready_with(std::forward<T>(value));
}
inline Future<void> make_ready_future() {
  return Future<void>::ready_with(absl::OkStatus());
}

// The producing side of a Future. Move-only. Destroying a promise that was
// never fulfilled completes its future with Cancelled ("broken promise").
template <class T>
class Promise {
 public:
  Promise()
      : state_(detail::IntrusivePtr<detail::FutureState<T>>::adopt(new detail::FutureState<T>)) {}
  Promise(Promise&&) noexcept = default;
  Promise& operator=(Promise&& o) noexcept {
    break_if_pending();
    state_ = std::move(o.state_);
    return *this;
  }
  ~Promise() { break_if_pending(); }

  // REQUIRES: called at most once.
  Future<T> get_future() { return Future<T>(state_); }

  // Each of these fulfils the promise; later calls are ignored.
  template <class V = T>
  requires(!std::is_void_v<V>) void set_value(V value) { set_result(Result<T>(std::move(value))); }
  void set_value() requires std::is_void_v<T> { set_result(absl::OkStatus()); }
  // REQUIRES: !why.ok().
  void set_error(absl::Status why) { set_result(Result<T>(std::move(why))); }
  void set_result(Result<T> r) {
    if (!state_) return;
    // Detach first: once the value is published, a waiter may destroy *this.
    auto state = std::move(state_);
    state->set(detail::from_result<T>(std::move(r)));
  }
  bool fulfilled() const { return state_ == nullptr; }

 private:
  void break_if_pending() {
    if (state_) set_error(absl::CancelledError("promise destroyed before it was fulfilled"));
  }
  detail::IntrusivePtr<detail::FutureState<T>> state_;
};

}  // namespace troupe
