// Intrusive reference counting for objects shared across threads (future
// states, actor cells). One atomic counter, no control block.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <utility>

namespace troupe::detail {

class RefCounted {
 public:
  RefCounted() = default;
  RefCounted(const RefCounted&) = delete;
  RefCounted& operator=(const RefCounted&) = delete;

  void add_ref() const { refs_.fetch_add(1, std::memory_order_relaxed); }
  void release() const {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }

 protected:
  virtual ~RefCounted() = default;

 private:
  mutable std::atomic<uint32_t> refs_{1};  // the creator holds the first reference
};

// Owning pointer to a RefCounted object.
template <class T>
class IntrusivePtr {
 public:
  IntrusivePtr() = default;
  IntrusivePtr(std::nullptr_t) {}
  // Adopts a reference the caller already holds (e.g. a fresh object's first one).
  static IntrusivePtr adopt(T* p) { return IntrusivePtr(p, false); }
  // Takes a new reference.
  static IntrusivePtr share(T* p) { return IntrusivePtr(p, true); }

  IntrusivePtr(const IntrusivePtr& o) : p_(o.p_) {
    if (p_) p_->add_ref();
  }
  IntrusivePtr(IntrusivePtr&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
  template <class U>
  IntrusivePtr(IntrusivePtr<U>&& o) noexcept : p_(o.detach()) {}
  IntrusivePtr& operator=(IntrusivePtr o) noexcept {
    std::swap(p_, o.p_);
    return *this;
  }
  ~IntrusivePtr() {
    if (p_) p_->release();
  }

  T* get() const { return p_; }
  T* operator->() const { return p_; }
  T& operator*() const { return *p_; }
  explicit operator bool() const { return p_ != nullptr; }
  friend bool operator==(const IntrusivePtr& a, std::nullptr_t) { return a.p_ == nullptr; }
  // Gives up ownership without releasing.
  T* detach() { return std::exchange(p_, nullptr); }

 private:
  IntrusivePtr(T* p, bool take_ref) : p_(p) {
    if (p_ && take_ref) p_->add_ref();
  }
  T* p_ = nullptr;
};

}  // namespace troupe::detail
