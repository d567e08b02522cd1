// A waiter that runs what brings its future's value (detail::WaitDriver), as
// a remote call's caller runs the transport that brings the reply.
#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "absl/synchronization/notification.h"
#include "core/detail/wait_driver.h"
#include "core/future.h"

namespace troupe {
namespace {

// Counts what a waiter does with it; poll() runs `on_poll` (if set), which
// says whether anything happened.
class FakeDriver final : public detail::WaitDriver {
 public:
  void begin_driving() override { ++begun; }
  bool poll() override {
    ++polls;
    poll_thread = std::this_thread::get_id();
    return on_poll ? on_poll() : false;
  }
  void end_driving(bool blocking) override {
    ++ended;
    ended_blocking = blocking;
    if (blocking) ended_to_block.Notify();
  }

  std::function<bool()> on_poll;
  int begun = 0;
  int polls = 0;
  int ended = 0;
  bool ended_blocking = false;
  std::thread::id poll_thread;
  absl::Notification ended_to_block;
};

TEST(FutureDrivingTest, AWaiterWithADriverCompletesItsFutureOnItsOwnThread) {
  Promise<int> promise;
  Future<int> future = promise.get_future();
  auto driver = std::make_shared<FakeDriver>();
  driver->on_poll = [&] {
    if (driver->polls < 3) return false;
    promise.set_value(7);  // what the transport's callback does
    return true;
  };
  detail::state_of(future)->drive_with(driver);
  auto r = future.get(absl::Seconds(10));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, 7);
  EXPECT_EQ(driver->poll_thread, std::this_thread::get_id());
  EXPECT_EQ(driver->begun, 1);
  EXPECT_EQ(driver->ended, 1);
  EXPECT_FALSE(driver->ended_blocking) << "nothing is left for the I/O thread";
}

TEST(FutureDrivingTest, AWaiterWhoseDriverBringsNothingHandsBackAndBlocks) {
  Promise<int> promise;
  Future<int> future = promise.get_future();
  auto driver = std::make_shared<FakeDriver>();
  detail::state_of(future)->drive_with(driver);
  // Set only once the waiter has given up driving: it must then block, and
  // wake for a value that another thread sets.
  std::thread setter([&] {
    if (driver->ended_to_block.WaitForNotificationWithTimeout(absl::Seconds(10))) {
      promise.set_value(8);
    }
  });
  auto r = future.get(absl::Seconds(10));
  setter.join();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, 8);
  EXPECT_EQ(driver->begun, 1);
  EXPECT_EQ(driver->ended, 1);
  EXPECT_TRUE(driver->ended_blocking) << "the I/O thread must take over at once";
  EXPECT_GT(driver->polls, 0);
}

TEST(FutureDrivingTest, AGoneDriverIsNotDriven) {
  Promise<int> promise;
  Future<int> future = promise.get_future();
  {
    auto driver = std::make_shared<FakeDriver>();
    detail::state_of(future)->drive_with(driver);
  }
  std::thread setter([&] { promise.set_value(9); });
  auto r = future.get(absl::Seconds(10));
  setter.join();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, 9);
}

TEST(FutureDrivingTest, OnlyTheFirstDriverCounts) {
  Promise<int> promise;
  Future<int> future = promise.get_future();
  auto first = std::make_shared<FakeDriver>();
  auto second = std::make_shared<FakeDriver>();
  first->on_poll = [&] {
    promise.set_value(10);
    return true;
  };
  detail::state_of(future)->drive_with(first);
  detail::state_of(future)->drive_with(second);
  auto r = future.get(absl::Seconds(10));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(first->begun, 1);
  EXPECT_EQ(second->begun, 0);
}

TEST(FutureDrivingTest, AWaitUnderPollDoesNotDriveAgain) {
  // A callback that runs under poll() and waits itself (it should not, but
  // may) waits without driving: the driving thread holds the transport.
  Promise<int> outer;
  Future<int> outer_future = outer.get_future();
  auto outer_driver = std::make_shared<FakeDriver>();
  auto inner_driver = std::make_shared<FakeDriver>();
  outer_driver->on_poll = [&] {
    Promise<int> inner;
    Future<int> inner_future = inner.get_future();
    detail::state_of(inner_future)->drive_with(inner_driver);
    std::thread setter([&] { inner.set_value(1); });
    auto got = inner_future.get(absl::Seconds(10));
    setter.join();
    outer.set_value(got.ok() ? *got + 1 : -1);
    return true;
  };
  detail::state_of(outer_future)->drive_with(outer_driver);
  auto r = outer_future.get(absl::Seconds(10));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, 2);
  EXPECT_EQ(outer_driver->begun, 1);
  EXPECT_EQ(inner_driver->begun, 0);
}

}  // namespace
}  // namespace troupe
