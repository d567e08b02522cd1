#include "core/dedicated_thread.h"

#include "core/detail/futex.h"

namespace troupe {

DedicatedThread::DedicatedThread() : thread_([this] { run(); }) {}

DedicatedThread::~DedicatedThread() {
  stop_.store(true, std::memory_order_release);
  signal_.fetch_add(1, std::memory_order_release);
  detail::futex_wake(&signal_, 1);
  thread_.join();
}

void DedicatedThread::schedule(Resumable* r) {
  pending_.store(r, std::memory_order_release);
  signal_.fetch_add(1, std::memory_order_release);
  detail::futex_wake(&signal_, 1);
}

void DedicatedThread::run() {
  for (;;) {
    uint32_t seen = signal_.load(std::memory_order_acquire);
    if (Resumable* r = pending_.exchange(nullptr, std::memory_order_acq_rel)) {
      r->resume();
      continue;
    }
    if (stop_.load(std::memory_order_acquire)) return;
    detail::futex_wait(&signal_, seen);
  }
}

}  // namespace troupe
