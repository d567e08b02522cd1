// A member of a collective group killed with SIGKILL in the middle of an
// allreduce: every other member's operation fails with Aborted well within
// the group's timeout, and the survivors plus a replacement then form the
// next generation, which works. Every rank is a process of its own, meeting
// the others through a FileStore.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tests/transport/transport_test_util.h"
#include "transport/collectives/collectives.h"
#include "transport/collectives/file_store.h"

namespace troupe::transport::testing {
namespace {

constexpr int kSize = 4;
constexpr int kVictim = 2;
constexpr absl::Duration kGroupTimeout = absl::Seconds(30);
// What "at once" means here: far below the group's timeout.
constexpr absl::Duration kDetectionBudget = absl::Seconds(5);

// The rank a gen-0 member has in generation 1: survivors keep their order,
// the replacement comes last.
int next_rank(int rank) {
  return rank < kVictim ? rank : rank - 1;
}

// Generation 1: allreduce a closed form, publish "ok" or what went wrong
// under gen1/<rank>, and stay until all four have published.
bool second_generation(Transport& transport, FileStore& store, const std::string& kind, int rank) {
  auto comm = Communicator::create(transport, store,
                                   {.rank = rank,
                                    .size = kSize,
                                    .group = "killed",
                                    .generation = 1,
                                    .listen_address = kind + "://127.0.0.1:0",
                                    .timeout = kGroupTimeout});
  std::string verdict = "ok";
  if (!comm.ok()) {
    verdict = comm.status().ToString();
  } else {
    std::vector<float> data(100000, static_cast<float>(rank + 1));
    absl::Status s = allreduce(**comm, DType::kFloat32, ReduceOp::kSum, data.data(), data.size());
    if (!s.ok()) verdict = s.ToString();
    for (float x : data) {
      if (verdict == "ok" && x != static_cast<float>(kSize * (kSize + 1) / 2))
        verdict = absl::StrCat("wrong sum ", x);
    }
  }
  bool ok = store.set(absl::StrCat("gen1/", rank), verdict).ok();
  for (int r = 0; r < kSize; ++r)
    ok = store.wait_get(absl::StrCat("gen1/", r), kGroupTimeout).ok() && ok;
  return ok;
}

// A generation-0 member: allreduces 4 MiB over and over (bounded), says so
// under started/<rank> after a few, and when an operation fails publishes
// "<status code> <unix ns>" under failed/<rank> and joins generation 1.
[[noreturn]] void member(const std::string& dir, const std::string& kind, int rank) {
  ::alarm(120);  // a child whose peers are gone still ends
  FileStore store(dir);
  auto transport = make_transport(kind, options_with(kToken, absl::StrCat("rank ", rank)));
  if (!transport.ok()) ::_exit(2);
  auto comm = Communicator::create(**transport, store,
                                   {.rank = rank,
                                    .size = kSize,
                                    .group = "killed",
                                    .listen_address = kind + "://127.0.0.1:0",
                                    .timeout = kGroupTimeout});
  if (!comm.ok()) ::_exit(3);
  std::vector<float> data(1 << 20, 1.0f);
  absl::Status failure = absl::InternalError("no operation failed");
  absl::Time deadline = absl::Now() + absl::Seconds(60);
  for (int i = 0; i < 100000 && absl::Now() < deadline; ++i) {
    absl::Status s = allreduce(**comm, DType::kFloat32, ReduceOp::kSum, data.data(), data.size());
    if (!s.ok()) {
      failure = s;
      break;
    }
    std::fill(data.begin(), data.end(), 1.0f);
    if (i == 2 && !store.set(absl::StrCat("started/", rank), "").ok()) ::_exit(4);
  }
  std::string report = absl::StrCat(static_cast<int>(failure.code()), " ",
                                    absl::ToUnixNanos(absl::Now()), " ", failure.message());
  if (!store.set(absl::StrCat("failed/", rank), report).ok()) ::_exit(5);
  ::_exit(second_generation(**transport, store, kind, next_rank(rank)) ? 0 : 6);
}

// The replacement: joins generation 1 as its last rank.
[[noreturn]] void replacement(const std::string& dir, const std::string& kind) {
  ::alarm(120);
  FileStore store(dir);
  auto transport = make_transport(kind, options_with(kToken, "replacement"));
  if (!transport.ok()) ::_exit(2);
  ::_exit(second_generation(**transport, store, kind, kSize - 1) ? 0 : 6);
}

pid_t fork_or_die(const std::function<void()>& child) {
  pid_t pid = ::fork();
  if (pid == 0) {
    child();
    ::_exit(7);
  }
  return pid;
}

class CollectivesKillTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    std::string tmpl = (std::filesystem::temp_directory_path() / "troupe-kill-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    // Whether the transport is available here, asked in a child: this
    // process must start no thread before the test forks its ranks.
    pid_t probe = fork_or_die([&] {
      ::_exit(FileStore(dir_).set("unavailable", transport_unavailable(GetParam())).ok() ? 0 : 1);
    });
    int status = 0;
    ASSERT_EQ(::waitpid(probe, &status, 0), probe);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "probe status " << status;
    auto why = FileStore(dir_).wait_get("unavailable", absl::Seconds(1));
    ASSERT_TRUE(why.ok()) << why.status();
    if (!why->empty()) GTEST_SKIP() << *why;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

TEST_P(CollectivesKillTest, SurvivorsAbortAtOnceAndTheNextGenerationWorks) {
  const std::string kind = GetParam();
  // Fork before this process starts any thread.
  std::vector<pid_t> pids;
  for (int r = 0; r < kSize; ++r)
    pids.push_back(fork_or_die([&] { member(dir_, kind, r); }));
  FileStore store(dir_);
  for (int r = 0; r < kSize; ++r) {
    ASSERT_TRUE(store.wait_get(absl::StrCat("started/", r), absl::Seconds(60)).ok())
        << "rank " << r << " never got going";
  }
  ASSERT_EQ(::kill(pids[kVictim], SIGKILL), 0);
  const absl::Time killed = absl::Now();
  pids.push_back(fork_or_die([&] { replacement(dir_, kind); }));

  for (int r = 0; r < kSize; ++r) {
    if (r == kVictim) continue;
    auto report = store.wait_get(absl::StrCat("failed/", r), kGroupTimeout);
    ASSERT_TRUE(report.ok()) << "rank " << r << " never failed: " << report.status();
    std::vector<std::string> parts = absl::StrSplit(*report, absl::MaxSplits(' ', 2));
    ASSERT_EQ(parts.size(), 3u) << *report;
    int code = -1;
    int64_t at = 0;
    ASSERT_TRUE(absl::SimpleAtoi(parts[0], &code) && absl::SimpleAtoi(parts[1], &at)) << *report;
    EXPECT_EQ(code, static_cast<int>(absl::StatusCode::kAborted))
        << "rank " << r << ": " << parts[2];
    absl::Duration detected = absl::FromUnixNanos(at) - killed;
    EXPECT_LT(detected, kDetectionBudget) << "rank " << r << " took " << detected;
  }
  for (int r = 0; r < kSize; ++r) {
    auto verdict = store.wait_get(absl::StrCat("gen1/", r), kGroupTimeout);
    ASSERT_TRUE(verdict.ok()) << "generation 1 rank " << r << ": " << verdict.status();
    EXPECT_EQ(*verdict, "ok") << "generation 1 rank " << r;
  }
  for (size_t i = 0; i < pids.size(); ++i) {
    int status = 0;
    ASSERT_EQ(::waitpid(pids[i], &status, 0), pids[i]);
    if (static_cast<int>(i) == kVictim) {
      EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    } else {
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
          << "process " << i << " status " << status;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, CollectivesKillTest,
                         ::testing::ValuesIn(transports_between_processes()),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

}  // namespace
}  // namespace troupe::transport::testing
