// The shared state behind Future<T>/Promise<T>. Internal to core.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/detail/message_pool.h"
#include "core/detail/ref_counted.h"
#include "core/detail/wait_driver.h"

namespace troupe::detail {

struct Unit {};

template <class T>
using Stored = std::conditional_t<std::is_void_v<T>, Unit, T>;

// Invoked exactly once when a state becomes ready. Owns itself.
class Continuation {
 public:
  virtual ~Continuation() = default;
  virtual void on_ready() = 0;
};

class FutureStateBase : public RefCounted {
 public:
  TROUPE_POOLED_ALLOCATION()
  bool ready() const { return (state_.load(std::memory_order_acquire) & kReady) != 0; }

  // Blocks until ready or `deadline`; returns ready(). Spins briefly first;
  // with a driver (drive_with), runs it for a while instead.
  bool wait(absl::Time deadline);

  // What a waiter may run while it waits (see WaitDriver): the transport
  // that brings the reply. Only the first driver given counts; a waiter
  // that has begun waiting without one does not take it up.
  // REQUIRES: the caller holds a reference.
  void drive_with(std::weak_ptr<WaitDriver> driver);

  // Runs `c->on_ready()` once the state is ready: now, if it already is.
  // REQUIRES: at most one continuation per state.
  void attach(Continuation* c);

 protected:
  // Marks the state ready, then runs the continuation and wakes waiters.
  // REQUIRES: the caller holds a reference for the duration of the call.
  void publish();

 private:
  static constexpr uint32_t kReady = 1;
  static constexpr uint32_t kHasContinuation = 2;
  static constexpr uint32_t kHasWaiter = 4;
  static constexpr uint32_t kHasDriver = 8;
  static constexpr uint32_t kSettingDriver = 16;

  // Runs `driver` until ready, `deadline`, or its budget is spent; returns
  // ready().
  bool drive(WaitDriver& driver, absl::Time deadline);

  std::atomic<uint32_t> state_{0};
  Continuation* continuation_ = nullptr;
  std::weak_ptr<WaitDriver> driver_;  // set once, before kHasDriver
};

template <class T>
class FutureState : public FutureStateBase {
 public:
  using Value = absl::StatusOr<Stored<T>>;

  // REQUIRES: called once, by a holder of a reference.
  void set(Value v) {
    value_.emplace(std::move(v));
    publish();
  }
  // REQUIRES: ready() and not taken before.
  Value take() { return std::move(*value_); }

 private:
  std::optional<Value> value_;
};

}  // namespace troupe::detail
