// when_all: one future for many.
#pragma once

#include <atomic>
#include <optional>
#include <vector>

#include "core/future.h"

namespace troupe {
namespace detail {

// Collects the results of N futures; completes when the last arrives.
template <class T>
class Gather final
    : public FutureState<std::conditional_t<std::is_void_v<T>, void, std::vector<T>>> {
 public:
  explicit Gather(size_t n) : remaining_(n), results_(n) {}

  void arrive(size_t index, absl::StatusOr<Stored<T>> v) {
    results_[index].emplace(std::move(v));
    if (remaining_.fetch_sub(1, std::memory_order_acq_rel) == 1) finish();
  }

  // Completes with the first error in input order, or all values.
  void finish() {
    for (auto& r : results_) {
      if (!r->ok()) {
        this->set(r->status());
        return;
      }
    }
    if constexpr (std::is_void_v<T>) {
      this->set(Unit{});
    } else {
      std::vector<T> values;
      values.reserve(results_.size());
      for (auto& r : results_)
        values.push_back(std::move(**r));
      this->set(std::move(values));
    }
  }

 private:
  std::atomic<size_t> remaining_;
  std::vector<std::optional<absl::StatusOr<Stored<T>>>> results_;
};

template <class T>
class GatherSlot final : public Continuation {
 public:
  GatherSlot(IntrusivePtr<Gather<T>> gather, size_t index, IntrusivePtr<FutureState<T>> src)
      : gather_(std::move(gather)), index_(index), src_(std::move(src)) {}
  void on_ready() override {
    gather_->arrive(index_, src_->take());
    delete this;
  }

 private:
  IntrusivePtr<Gather<T>> gather_;
  size_t index_;
  IntrusivePtr<FutureState<T>> src_;
};

}  // namespace detail

// Completes when every input has completed: with all values in input order,
// or with the first error in input order. Consumes the inputs. An empty or
// consumed input counts as a FailedPrecondition error.
template <class T>
auto when_all(std::vector<Future<T>> futures)
    -> Future<std::conditional_t<std::is_void_v<T>, void, std::vector<T>>> {
  using Out = std::conditional_t<std::is_void_v<T>, void, std::vector<T>>;
  auto gather =
      detail::IntrusivePtr<detail::Gather<T>>::adopt(new detail::Gather<T>(futures.size()));
  Future<Out> result(detail::IntrusivePtr<detail::FutureState<Out>>::share(gather.get()));
  if (futures.empty()) {
    gather->finish();
    return result;
  }
  for (size_t i = 0; i < futures.size(); ++i) {
    auto& src = detail::state_of(futures[i]);
    if (!src) {
      gather->arrive(i, absl::FailedPreconditionError("when_all: input future is empty"));
      continue;
    }
    detail::FutureState<T>* raw = src.get();
    raw->attach(new detail::GatherSlot<T>(gather, i, std::move(src)));
  }
  return result;
}

}  // namespace troupe
