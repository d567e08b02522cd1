// A work-stealing thread pool that runs actors.
//
// Each worker has a "next" slot and a FIFO run queue. Work scheduled from a
// worker goes to its next slot, so an actor woken by a message runs right after
// the sender on the same core, cache-hot, without waking anyone (the message
// hand-off of a ping-pong costs no system call). The slot's previous occupant
// moves to the run queue, where idle workers steal it. A next-slot entry that
// sits behind a long-running task is stolen once it has aged (the owner has not
// advanced for a few microseconds), so a busy sender does not serialise its
// receivers. Work scheduled from other threads goes to a global queue.
//
// Idle workers spin briefly, then park on a futex; at most half of them (one
// at least) spin at a time, the others park at once. New work wakes a parked
// worker only when none spins; a spinner that finds work wakes a successor if
// more work is waiting.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>

#include "core/detail/spinlock.h"
#include "core/executor.h"

namespace troupe {

class ThreadPool final : public Executor {
 public:
  // Starts `threads` workers (at least one). While workers are blocked inside a
  // BlockingRegion the pool adds workers so that `threads` can still run, up to
  // `max_threads` in all (0 picks 8 x threads + 16). Without `spin`, an idle
  // worker parks at once: each hand-off from outside then costs a wake-up, but
  // a process whose messages come steadily, a little apart (a head taking
  // thousands of heartbeats a second), does not burn its cores between them.
  explicit ThreadPool(int threads, int max_threads = 0, bool spin = true);
  // Stops and joins all workers. REQUIRES: nothing is scheduled any more.
  ~ThreadPool() override;

  void schedule(Resumable* r) override;

  // Number of worker threads started so far (grows under blocking).
  int num_workers() const { return num_workers_.load(std::memory_order_acquire); }
  // Workers currently inside a BlockingRegion.
  int num_blocked() const { return blocked_.load(std::memory_order_relaxed); }

 private:
  friend class BlockingRegion;
  struct Worker;
  static thread_local Worker* current_worker_;

  void add_worker();
  void run_worker(Worker* w);
  Resumable* find_own_work(Worker* w);
  Resumable* find_other_work(Worker* w);
  Resumable* steal_from(Worker* thief, Worker* victim);
  Resumable* spin_then_park(Worker* w);
  // Whether any queue or next slot holds work.
  bool work_waiting() const;
  void push_local(Worker* w, Resumable* r);
  void push_global(Resumable* r);
  Resumable* pop_global();
  void notify();
  void wake_all();
  void enter_blocking();
  void exit_blocking();

  const int target_threads_;
  const int spin_rounds_;
  const int max_spinners_;
  const int max_threads_;
  std::unique_ptr<std::atomic<Worker*>[]> workers_;  // max_threads_ slots
  std::atomic<int> num_workers_{0};
  std::mutex grow_mu_;

  detail::SpinLock global_mu_;
  Resumable* global_head_ = nullptr;
  Resumable* global_tail_ = nullptr;
  std::atomic<uint32_t> global_size_{0};

  // Invariant: a worker is counted in spinning_ while it looks for work and in
  // parked_ while it is about to sleep or sleeping on epoch_.
  alignas(64) std::atomic<int> spinning_{0};
  std::atomic<int> parked_{0};
  std::atomic<uint32_t> epoch_{0};
  std::atomic<int> blocked_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace troupe
