#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "core/detail/futex.h"

namespace troupe {
namespace {

// A Resumable that counts its runs and can reschedule itself.
class Task final : public Resumable {
 public:
  Task(ThreadPool* pool, std::atomic<int>* done, int repeats)
      : pool_(pool), done_(done), repeats_(repeats) {}
  void resume() override {
    ++runs_;
    if (--repeats_ > 0) {
      pool_->schedule(this);
      return;
    }
    done_->fetch_add(1);  // the test may destroy *this from here on
  }
  int runs() const { return runs_; }

 private:
  ThreadPool* pool_;
  std::atomic<int>* done_;
  int repeats_;
  int runs_ = 0;
};

bool wait_for(std::atomic<int>& counter, int target, absl::Duration timeout) {
  absl::Time deadline = absl::Now() + timeout;
  while (counter.load() < target) {
    if (absl::Now() > deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

TEST(ThreadPoolTest, RunsEverythingScheduledFromOutsideAndInside) {
  ThreadPool pool(2);
  std::atomic<int> done{0};
  std::vector<std::unique_ptr<Task>> tasks;
  for (int i = 0; i < 100; ++i)
    tasks.push_back(std::make_unique<Task>(&pool, &done, 50));
  for (auto& t : tasks)
    pool.schedule(t.get());
  ASSERT_TRUE(wait_for(done, 100, absl::Seconds(30)));
  for (auto& t : tasks)
    EXPECT_EQ(t->runs(), 50);
}

// A task that blocks its worker until released, inside a BlockingRegion.
class Blocker final : public Resumable {
 public:
  explicit Blocker(std::atomic<uint32_t>* release) : release_(release) {}
  void resume() override {
    BlockingRegion region;
    started.fetch_add(1);
    while (release_->load() == 0)
      detail::futex_wait(release_, 0, absl::Now() + absl::Seconds(1));
    finished.fetch_add(1);
  }
  std::atomic<int> started{0};
  std::atomic<int> finished{0};

 private:
  std::atomic<uint32_t>* release_;
};

TEST(ThreadPoolTest, BlockedWorkersAreReplaced) {
  ThreadPool pool(2);
  std::atomic<uint32_t> release{0};
  std::vector<std::unique_ptr<Blocker>> blockers;
  for (int i = 0; i < 6; ++i)
    blockers.push_back(std::make_unique<Blocker>(&release));
  for (auto& b : blockers)
    pool.schedule(b.get());
  // All six block at once, which needs more than the two original workers.
  std::atomic<int> started{0};
  absl::Time deadline = absl::Now() + absl::Seconds(30);
  int total = 0;
  while (absl::Now() < deadline) {
    total = 0;
    for (auto& b : blockers)
      total += b->started.load();
    if (total == 6) break;
    std::this_thread::yield();
  }
  EXPECT_EQ(total, 6);
  EXPECT_GE(pool.num_workers(), 6);
  // Meanwhile ordinary work still runs.
  std::atomic<int> done{0};
  Task task(&pool, &done, 10);
  pool.schedule(&task);
  EXPECT_TRUE(wait_for(done, 1, absl::Seconds(30)));
  release.store(1);
  detail::futex_wake(&release, INT32_MAX);
  for (auto& b : blockers) {
    absl::Time until = absl::Now() + absl::Seconds(30);
    while (b->finished.load() == 0 && absl::Now() < until)
      std::this_thread::yield();
    EXPECT_EQ(b->finished.load(), 1);
  }
}

}  // namespace
}  // namespace troupe
