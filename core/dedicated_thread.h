// An executor with one thread of its own, for a compute-heavy actor that
// should not share the pool (SpawnOptions::dedicated_thread).
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>

#include "core/executor.h"

namespace troupe {

class DedicatedThread final : public Executor {
 public:
  DedicatedThread();
  // Stops and joins the thread. REQUIRES: nothing is scheduled any more.
  ~DedicatedThread() override;

  // REQUIRES: at most one Resumable is scheduled at a time.
  void schedule(Resumable* r) override;

  // True when called on this executor's own thread.
  bool is_current() const { return std::this_thread::get_id() == thread_.get_id(); }

 private:
  void run();

  std::atomic<Resumable*> pending_{nullptr};
  std::atomic<uint32_t> signal_{0};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace troupe
