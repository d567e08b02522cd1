#include "core/future.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "core/status.h"
#include "core/when_all.h"

namespace troupe {
namespace {

TEST(FutureTest, PromiseDeliversValue) {
  Promise<int> p;
  Future<int> f = p.get_future();
  EXPECT_FALSE(f.ready());
  p.set_value(42);
  EXPECT_TRUE(f.ready());
  absl::StatusOr<int> v = f.get();
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, 42);
  EXPECT_FALSE(f.valid());
  EXPECT_EQ(f.get().status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(FutureTest, PromiseDeliversError) {
  Promise<std::string> p;
  Future<std::string> f = p.get_future();
  p.set_error(absl::NotFoundError("nope"));
  EXPECT_EQ(f.get().status(), absl::NotFoundError("nope"));
}

TEST(FutureTest, VoidFuture) {
  Promise<void> p;
  Future<void> f = p.get_future();
  p.set_value();
  EXPECT_TRUE(f.get().ok());
}

TEST(FutureTest, BrokenPromiseCancels) {
  Future<int> f;
  {
    Promise<int> p;
    f = p.get_future();
  }
  EXPECT_EQ(f.get().status().code(), absl::StatusCode::kCancelled);
}

TEST(FutureTest, GetWithDeadlineTimesOutThenSucceeds) {
  Promise<int> p;
  Future<int> f = p.get_future();
  absl::Time start = absl::Now();
  absl::StatusOr<int> early = f.get(absl::Milliseconds(30));
  EXPECT_EQ(core_error(early.status()), CoreError::kDeadlineExceeded);
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(30));
  EXPECT_TRUE(f.valid()) << "a timed-out get leaves the future usable";
  std::thread producer([&] { p.set_value(7); });
  absl::StatusOr<int> late = f.get(absl::Seconds(10));
  producer.join();
  ASSERT_TRUE(late.ok());
  EXPECT_EQ(*late, 7);
}

TEST(FutureTest, GetWakesWhenValueArrivesFromAnotherThread) {
  for (int i = 0; i < 200; ++i) {
    Promise<int> p;
    Future<int> f = p.get_future();
    std::thread producer([&p, i] { p.set_value(i); });
    absl::StatusOr<int> v = f.get(absl::Seconds(10));
    producer.join();
    ASSERT_TRUE(v.ok());
    ASSERT_EQ(*v, i);
  }
}

TEST(FutureTest, ThenChainsValues) {
  Promise<int> p;
  Future<std::string> f = p.get_future().then([](int v) { return v * 2; }).then([](int v) {
    return std::to_string(v);
  });
  p.set_value(21);
  EXPECT_EQ(*f.get(), "42");
}

TEST(FutureTest, ThenOnReadyFutureRunsImmediately) {
  Future<int> f = make_ready_future(5).then([](int v) { return v + 1; });
  EXPECT_TRUE(f.ready());
  EXPECT_EQ(*f.get(), 6);
}

TEST(FutureTest, ThenSkipsValueContinuationOnError) {
  Promise<int> p;
  bool ran = false;
  Future<int> f = p.get_future().then([&](int v) {
    ran = true;
    return v;
  });
  p.set_error(absl::InternalError("boom"));
  EXPECT_EQ(f.get().status(), absl::InternalError("boom"));
  EXPECT_FALSE(ran);
}

TEST(FutureTest, ThenTakingResultSeesErrors) {
  Promise<int> p;
  Future<std::string> f = p.get_future().then([](absl::StatusOr<int> r) -> std::string {
    return r.ok() ? "value" : std::string(r.status().message());
  });
  p.set_error(absl::InternalError("boom"));
  EXPECT_EQ(*f.get(), "boom");
}

TEST(FutureTest, ThenUnwrapsStatusOrAndFuture) {
  Promise<int> p;
  Future<int> a = p.get_future().then([](int v) -> absl::StatusOr<int> {
    if (v < 0) return absl::InvalidArgumentError("negative");
    return v;
  });
  Future<int> b = std::move(a).then([](int v) { return make_ready_future(v * 10); });
  Future<void> c = std::move(b).then(
      [](int v) { return v == 30 ? absl::OkStatus() : absl::InternalError("bad"); });
  p.set_value(3);
  EXPECT_TRUE(c.get().ok());
}

TEST(FutureTest, ThenContinuationThatThrowsGivesInternalError) {
  Promise<int> p;
  Future<int> f = p.get_future().then([](int) -> int { throw std::runtime_error("oops"); });
  p.set_value(1);
  absl::StatusOr<int> r = f.get();
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInternal);
  EXPECT_NE(r.status().message().find("oops"), absl::string_view::npos);
}

TEST(FutureTest, WhenAllCollectsInOrder) {
  std::vector<Promise<int>> promises(5);
  std::vector<Future<int>> futures;
  for (auto& p : promises)
    futures.push_back(p.get_future());
  Future<std::vector<int>> all = when_all(std::move(futures));
  for (int i = 4; i >= 0; --i) {
    EXPECT_FALSE(all.ready());
    promises[i].set_value(i * i);
  }
  absl::StatusOr<std::vector<int>> v = all.get(absl::Seconds(1));
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, (std::vector<int>{0, 1, 4, 9, 16}));
}

TEST(FutureTest, WhenAllReportsFirstErrorInInputOrder) {
  std::vector<Promise<void>> promises(3);
  std::vector<Future<void>> futures;
  for (auto& p : promises)
    futures.push_back(p.get_future());
  Future<void> all = when_all(std::move(futures));
  promises[2].set_error(absl::InternalError("third"));
  promises[0].set_value();
  EXPECT_FALSE(all.ready()) << "when_all waits for every input";
  promises[1].set_error(absl::InternalError("second"));
  EXPECT_EQ(all.get(absl::Seconds(1)), absl::InternalError("second"));
}

TEST(FutureTest, WhenAllOfNothingIsReady) {
  Future<std::vector<int>> all = when_all(std::vector<Future<int>>{});
  ASSERT_TRUE(all.ready());
  EXPECT_TRUE(all.get()->empty());
}

TEST(StatusTest, CoreErrorsAreDistinct) {
  EXPECT_EQ(core_error(ActorDiedError("x")), CoreError::kActorDied);
  EXPECT_EQ(core_error(absl::UnavailableError("x")), CoreError::kUnavailable);
  EXPECT_EQ(core_error(absl::DeadlineExceededError("x")), CoreError::kDeadlineExceeded);
  EXPECT_EQ(core_error(absl::AbortedError("x")), CoreError::kAborted);
  EXPECT_EQ(core_error(absl::OkStatus()), CoreError::kOk);
  EXPECT_EQ(ActorDiedError("worker 3 lost").message(), "worker 3 lost");
}

}  // namespace
}  // namespace troupe
