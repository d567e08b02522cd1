// Executors run Resumables: units of work that may be scheduled many times
// (an actor is one; each time it has mail it is scheduled, and it runs a
// batch of messages in resume()).
#pragma once

namespace troupe {

class Resumable {
 public:
  virtual ~Resumable() = default;
  // Runs one slice of work. Called by exactly one thread at a time: a
  // Resumable is scheduled again only after it handed itself back.
  virtual void resume() = 0;

 private:
  friend class ThreadPool;
  friend class DedicatedThread;
  Resumable* next_scheduled_ = nullptr;  // link in executor run queues
};

class Executor {
 public:
  virtual ~Executor() = default;
  // Arranges for r->resume() to be called once, soon, on some thread of this
  // executor. Thread-safe. REQUIRES: r is not already scheduled.
  virtual void schedule(Resumable* r) = 0;
};

// RAII marker for code that is about to block a thread (waiting on a future,
// on a full mailbox). On a pool worker it hands the worker's pending work to
// others and, if every worker is blocked, adds a worker, so that the actors
// being waited for can still run. Elsewhere it does nothing.
class BlockingRegion {
 public:
  BlockingRegion();
  ~BlockingRegion();
  BlockingRegion(const BlockingRegion&) = delete;
  BlockingRegion& operator=(const BlockingRegion&) = delete;

 private:
  class ThreadPool* pool_;
};

}  // namespace troupe
