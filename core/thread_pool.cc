#include "core/thread_pool.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <climits>
#include <vector>

#include "absl/time/clock.h"
#include "core/detail/futex.h"

namespace troupe {
namespace {

// A task run from the next slot this many times in a row yields to the queue.
constexpr int kMaxNextStreak = 32;
// Every kGlobalCheckInterval tasks a worker looks at the global queue first.
constexpr uint32_t kGlobalCheckInterval = 61;
// Spinning: rounds of looking for work, each followed by kPausesPerRound pauses.
constexpr int kSpinRounds = 64;
constexpr int kPausesPerRound = 32;
// Spinning lets the CPU go every few rounds: on a host with more busy
// threads than cores (a worker's actor threads, its transport's poller, the
// driver beside it) a spinner that never yields keeps a thread that has work -
// often the one whose message it waits for - off the core for a time slice.
// On two cores it tripled cluster_bench's 1 KiB call rate and left actor_bench
// as it was.
constexpr int kRoundsPerYield = 8;
// Idle workers that spin at once, at most: this fraction of the pool, one at
// least. In a pool of two, under a stream of calls to one actor, the second
// idle spinner found no more work than the first and held a core that the
// threads with work (the transport's poller, the caller beside it) needed:
// cluster_bench's sync calls ran at 39-131 k/s, bimodal, with it; 62-108 k/s
// without.
constexpr int kThreadsPerSpinner = 2;
// A next-slot entry seen unchanged, with its owner not advancing, for this
// many spin rounds is stolen.
constexpr int kNextAgeRounds = 4;
// Parked workers re-check for work at least this often (a safety net).
constexpr absl::Duration kParkTimeout = absl::Milliseconds(50);

}  // namespace

struct alignas(64) ThreadPool::Worker {
  ThreadPool* pool = nullptr;
  int index = 0;
  std::thread thread;

  // Owner-written, thief-read.
  std::atomic<Resumable*> next{nullptr};
  std::atomic<uint64_t> runs{0};

  detail::SpinLock queue_mu;
  Resumable* head = nullptr;
  Resumable* tail = nullptr;
  std::atomic<uint32_t> queue_size{0};

  // Owner-only.
  int next_streak = 0;
  uint32_t tick = 0;
  uint64_t rng = 0;
  // Thief-side memory of an occupied next slot, for aging.
  Worker* aging_victim = nullptr;
  Resumable* aging_entry = nullptr;
  uint64_t aging_runs = 0;
  int aging_rounds = 0;
};

thread_local ThreadPool::Worker* ThreadPool::current_worker_ = nullptr;

ThreadPool::ThreadPool(int threads, int max_threads, bool spin)
    : target_threads_(std::max(1, threads)),
      spin_rounds_(spin ? kSpinRounds : 0),
      max_spinners_(std::max(1, target_threads_ / kThreadsPerSpinner)),
      max_threads_(max_threads > 0 ? std::max(max_threads, target_threads_)
                                   : target_threads_ * 8 + 16),
      workers_(new std::atomic<Worker*>[max_threads_]) {
  for (int i = 0; i < max_threads_; ++i)
    workers_[i].store(nullptr, std::memory_order_relaxed);
  for (int i = 0; i < target_threads_; ++i)
    add_worker();
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_seq_cst);
  wake_all();
  std::lock_guard<std::mutex> lock(grow_mu_);
  int n = num_workers_.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i)
    workers_[i].load()->thread.join();
  for (int i = 0; i < n; ++i)
    delete workers_[i].load();
}

void ThreadPool::add_worker() {
  std::lock_guard<std::mutex> lock(grow_mu_);
  int n = num_workers_.load(std::memory_order_relaxed);
  if (n >= max_threads_ || stop_.load()) return;
  auto* w = new Worker;
  w->pool = this;
  w->index = n;
  w->rng = 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(n + 1);
  workers_[n].store(w, std::memory_order_release);
  num_workers_.store(n + 1, std::memory_order_release);
  w->thread = std::thread([this, w] { run_worker(w); });
}

void ThreadPool::schedule(Resumable* r) {
  Worker* w = current_worker_;
  if (w != nullptr && w->pool == this) {
    Resumable* previous = w->next.exchange(r, std::memory_order_acq_rel);
    if (previous != nullptr) push_local(w, previous);
  } else {
    push_global(r);
  }
  notify();
}

void ThreadPool::push_local(Worker* w, Resumable* r) {
  r->next_scheduled_ = nullptr;
  std::lock_guard<detail::SpinLock> lock(w->queue_mu);
  if (w->tail) {
    w->tail->next_scheduled_ = r;
  } else {
    w->head = r;
  }
  w->tail = r;
  w->queue_size.fetch_add(1, std::memory_order_relaxed);
}

void ThreadPool::push_global(Resumable* r) {
  r->next_scheduled_ = nullptr;
  std::lock_guard<detail::SpinLock> lock(global_mu_);
  if (global_tail_) {
    global_tail_->next_scheduled_ = r;
  } else {
    global_head_ = r;
  }
  global_tail_ = r;
  global_size_.fetch_add(1, std::memory_order_relaxed);
}

Resumable* ThreadPool::pop_global() {
  if (global_size_.load(std::memory_order_relaxed) == 0) return nullptr;
  std::lock_guard<detail::SpinLock> lock(global_mu_);
  Resumable* r = global_head_;
  if (r == nullptr) return nullptr;
  global_head_ = r->next_scheduled_;
  if (global_head_ == nullptr) global_tail_ = nullptr;
  global_size_.fetch_sub(1, std::memory_order_relaxed);
  return r;
}

void ThreadPool::notify() {
  // Dekker with spin_then_park(): we published work, then read the sleeper
  // counts; a parking worker bumps parked_, then re-reads the queues.
#if defined(__SANITIZE_THREAD__)
  // ThreadSanitizer does not model fences; an RMW orders the same way.
  if (spinning_.fetch_add(0, std::memory_order_seq_cst) > 0) return;
  if (parked_.fetch_add(0, std::memory_order_seq_cst) == 0) return;
#else
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (spinning_.load(std::memory_order_relaxed) > 0) return;
  if (parked_.load(std::memory_order_relaxed) == 0) return;
#endif
  epoch_.fetch_add(1, std::memory_order_release);
  detail::futex_wake(&epoch_, 1);
}

void ThreadPool::wake_all() {
  epoch_.fetch_add(1, std::memory_order_seq_cst);
  detail::futex_wake(&epoch_, INT_MAX);
}

Resumable* ThreadPool::find_own_work(Worker* w) {
  if (++w->tick % kGlobalCheckInterval == 0) {
    if (Resumable* r = pop_global()) return r;
  }
  if (w->next_streak < kMaxNextStreak) {
    if (Resumable* r = w->next.exchange(nullptr, std::memory_order_acq_rel)) {
      ++w->next_streak;
      return r;
    }
  } else if (Resumable* r = w->next.exchange(nullptr, std::memory_order_acq_rel)) {
    push_local(w, r);  // fairness: let the run queue go first
  }
  w->next_streak = 0;
  if (w->queue_size.load(std::memory_order_relaxed) == 0) return nullptr;
  std::lock_guard<detail::SpinLock> lock(w->queue_mu);
  Resumable* r = w->head;
  if (r == nullptr) return nullptr;
  w->head = r->next_scheduled_;
  if (w->head == nullptr) w->tail = nullptr;
  w->queue_size.fetch_sub(1, std::memory_order_relaxed);
  return r;
}

Resumable* ThreadPool::steal_from(Worker* thief, Worker* victim) {
  if (victim->queue_size.load(std::memory_order_relaxed) > 0 && victim->queue_mu.try_lock()) {
    Resumable* r = victim->head;
    if (r) {
      victim->head = r->next_scheduled_;
      if (victim->head == nullptr) victim->tail = nullptr;
      victim->queue_size.fetch_sub(1, std::memory_order_relaxed);
    }
    victim->queue_mu.unlock();
    if (r) return r;
  }
  Resumable* entry = victim->next.load(std::memory_order_relaxed);
  if (entry == nullptr) return nullptr;
  uint64_t runs = victim->runs.load(std::memory_order_relaxed);
  if (thief->aging_victim == victim && thief->aging_entry == entry && thief->aging_runs == runs) {
    if (++thief->aging_rounds >= kNextAgeRounds &&
        victim->next.compare_exchange_strong(entry, nullptr, std::memory_order_acq_rel)) {
      thief->aging_victim = nullptr;
      return entry;
    }
  } else {
    thief->aging_victim = victim;
    thief->aging_entry = entry;
    thief->aging_runs = runs;
    thief->aging_rounds = 1;
  }
  return nullptr;
}

Resumable* ThreadPool::find_other_work(Worker* w) {
  if (Resumable* r = pop_global()) return r;
  int n = num_workers_.load(std::memory_order_acquire);
  w->rng ^= w->rng << 13;
  w->rng ^= w->rng >> 7;
  w->rng ^= w->rng << 17;
  int start = static_cast<int>(w->rng % static_cast<uint64_t>(n));
  for (int i = 0; i < n; ++i) {
    Worker* victim = workers_[(start + i) % n].load(std::memory_order_acquire);
    if (victim == w || victim == nullptr) continue;
    if (Resumable* r = steal_from(w, victim)) return r;
  }
  return nullptr;
}

bool ThreadPool::work_waiting() const {
  if (global_size_.load(std::memory_order_relaxed) > 0) return true;
  const int n = num_workers_.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i) {
    const Worker* w = workers_[i].load(std::memory_order_acquire);
    if (w == nullptr) continue;
    if (w->queue_size.load(std::memory_order_relaxed) > 0 ||
        w->next.load(std::memory_order_relaxed) != nullptr) {
      return true;
    }
  }
  return false;
}

Resumable* ThreadPool::spin_then_park(Worker* w) {
  while (!stop_.load(std::memory_order_acquire)) {
    const int spinners = spinning_.fetch_add(1, std::memory_order_seq_cst);
    const int rounds = spinners < max_spinners_ ? spin_rounds_ : 0;
    for (int round = 0; round < rounds; ++round) {
      Resumable* r = find_own_work(w);
      if (r == nullptr) r = find_other_work(w);
      if (r != nullptr) {
        // The last spinner to find work wakes a successor if work is left:
        // work scheduled while we spun woke nobody. (Dekker with notify():
        // a producer that saw us spinning had published its work before our
        // decrement, and we look after it.)
        if (spinning_.fetch_sub(1, std::memory_order_seq_cst) == 1 && work_waiting()) notify();
        return r;
      }
      for (int i = 0; i < kPausesPerRound; ++i)
        detail::cpu_relax();
      if (round % kRoundsPerYield == kRoundsPerYield - 1) sched_yield();
      if (stop_.load(std::memory_order_relaxed)) break;
    }
    spinning_.fetch_sub(1, std::memory_order_seq_cst);

    parked_.fetch_add(1, std::memory_order_seq_cst);
    uint32_t key = epoch_.load(std::memory_order_acquire);
    Resumable* r = find_own_work(w);
    if (r == nullptr) r = find_other_work(w);
    if (r != nullptr || stop_.load(std::memory_order_acquire)) {
      parked_.fetch_sub(1, std::memory_order_relaxed);
      return r;
    }
    detail::futex_wait(&epoch_, key, absl::Now() + kParkTimeout);
    parked_.fetch_sub(1, std::memory_order_relaxed);
  }
  return nullptr;
}

void ThreadPool::run_worker(Worker* w) {
  pthread_setname_np(pthread_self(), "troupe-actors");  // as top -H and perf show it
  current_worker_ = w;
  for (;;) {
    Resumable* r = find_own_work(w);
    if (r == nullptr) r = spin_then_park(w);
    if (r == nullptr) break;  // stopping
    w->runs.store(w->runs.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    r->resume();
  }
  current_worker_ = nullptr;
}

void ThreadPool::enter_blocking() {
  Worker* w = current_worker_;
  if (Resumable* r = w->next.exchange(nullptr, std::memory_order_acq_rel)) push_local(w, r);
  int blocked = blocked_.fetch_add(1, std::memory_order_seq_cst) + 1;
  if (num_workers() - blocked < target_threads_) add_worker();
  notify();
}

void ThreadPool::exit_blocking() {
  blocked_.fetch_sub(1, std::memory_order_relaxed);
}

BlockingRegion::BlockingRegion() : pool_(nullptr) {
  if (ThreadPool::current_worker_ != nullptr) {
    pool_ = ThreadPool::current_worker_->pool;
    pool_->enter_blocking();
  }
}

BlockingRegion::~BlockingRegion() {
  if (pool_ != nullptr) pool_->exit_blocking();
}

}  // namespace troupe
