// FileStore: the rendezvous store over a shared directory. Values, overwrite,
// timeouts naming the key, key escaping, and ranks in separate processes - a
// forked child publishing a key, and a two-process allreduce over tcp whose
// ranks meet through the store.
#include "transport/collectives/file_store.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/transport/transport_test_util.h"
#include "transport/collectives/collectives.h"
#include "transport/collectives/communicator.h"

namespace troupe::transport::testing {
namespace {

// A run's own directory, removed at the end.
class FileStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (std::filesystem::temp_directory_path() / "file-store-XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr) << std::strerror(errno);
    dir_ = pattern;
  }
  void TearDown() override {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  std::vector<std::string> file_names() const {
    std::vector<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(dir_))
      names.push_back(entry.path().filename().string());
    return names;
  }

  std::string dir_;
};

// Ends a forked child with `ok ? 0 : 1`, skipping the test framework's exit
// handlers (the parent owns the run). Children arm an alarm first, so a child
// whose peer is gone still ends.
[[noreturn]] void exit_child(bool ok) {
  ::_exit(ok ? 0 : 1);
}

// Waits for `pid` (which arms an alarm, so the wait is bounded); its exit code,
// or -1 when it did not exit normally.
int wait_child(pid_t pid) {
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST_F(FileStoreTest, SetThenGet) {
  FileStore store(dir_);
  ASSERT_TRUE(store.set("alpha", "one").ok());
  auto v = store.wait_get("alpha", absl::Seconds(1));
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, "one");
  // A second store over the same directory (another process, say) sees it.
  FileStore other(dir_);
  auto w = other.wait_get("alpha", absl::ZeroDuration());
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(*w, "one");
}

TEST_F(FileStoreTest, BinaryAndEmptyValues) {
  FileStore store(dir_);
  std::string binary("a\0b\n\xff", 5);
  ASSERT_TRUE(store.set("binary", binary).ok());
  ASSERT_TRUE(store.set("empty", "").ok());
  EXPECT_EQ(*store.wait_get("binary", absl::Seconds(1)), binary);
  EXPECT_EQ(*store.wait_get("empty", absl::Seconds(1)), "");
}

TEST_F(FileStoreTest, OverwriteReplacesTheValueAndLeavesNoTemporaryFiles) {
  FileStore store(dir_);
  ASSERT_TRUE(store.set("k", "first").ok());
  ASSERT_TRUE(store.set("k", "second, longer than the first").ok());
  ASSERT_TRUE(store.set("k", "3").ok());
  EXPECT_EQ(*store.wait_get("k", absl::Seconds(1)), "3");
  EXPECT_EQ(file_names(), std::vector<std::string>{"k"});
}

TEST_F(FileStoreTest, TimeoutIsDeadlineExceededNamingTheKey) {
  FileStore store(dir_);
  absl::Time start = absl::Now();
  auto v = store.wait_get("group/0/rank/3", absl::Milliseconds(30));
  absl::Duration took = absl::Now() - start;
  ASSERT_EQ(v.status().code(), absl::StatusCode::kDeadlineExceeded) << v.status();
  EXPECT_NE(v.status().message().find("'group/0/rank/3'"), std::string::npos) << v.status();
  EXPECT_GE(took, absl::Milliseconds(30));
  EXPECT_LT(took, absl::Seconds(5));  // the backoff is capped at 10 ms
  // A zero timeout looks once.
  EXPECT_EQ(store.wait_get("absent", absl::ZeroDuration()).status().code(),
            absl::StatusCode::kDeadlineExceeded);
}

TEST_F(FileStoreTest, KeysWithSlashesAndEscapesAreDistinctFiles) {
  FileStore store(dir_);
  const std::vector<std::string> keys = {"a/b",  "a%2Fb", "a%b", "a.b", "a_b", "a-b",        "/",
                                         "a/b/", "",      ".",   "..",  "a b", "g/0/rank/12"};
  for (size_t i = 0; i < keys.size(); ++i)
    ASSERT_TRUE(store.set(keys[i], absl::StrCat("value ", i)).ok()) << "'" << keys[i] << "'";
  for (size_t i = 0; i < keys.size(); ++i) {
    auto v = store.wait_get(keys[i], absl::Seconds(1));
    ASSERT_TRUE(v.ok()) << v.status();
    EXPECT_EQ(*v, absl::StrCat("value ", i)) << "'" << keys[i] << "'";
  }
  std::vector<std::string> names = file_names();
  EXPECT_EQ(names.size(), keys.size());  // one flat file per key, none in subdirectories
  for (const std::string& name : names) {
    EXPECT_EQ(name.find('/'), std::string::npos);
    EXPECT_NE(name.front(), '.') << name;  // never mistaken for a temporary file
  }
  EXPECT_EQ(FileStore::file_name_of("g/0/rank/1"), "g%2F0%2Frank%2F1");
  EXPECT_EQ(FileStore::file_name_of("100%"), "100%25");
}

TEST_F(FileStoreTest, KeyTooLongForAFileNameIsInvalidArgument) {
  FileStore store(dir_);
  std::string key(100, '/');  // 300 bytes escaped
  EXPECT_EQ(store.set(key, "v").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store.wait_get(key, absl::ZeroDuration()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(FileStoreTest, MissingDirectoryFailsNamingIt) {
  FileStore store(dir_ + "/not-there");
  absl::Status s = store.set("k", "v");
  ASSERT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  EXPECT_NE(s.message().find("not-there"), std::string::npos) << s;
  EXPECT_NE(s.message().find("'k'"), std::string::npos) << s;
}

TEST_F(FileStoreTest, ForkedChildPublishesAKeyTheParentWaitsFor) {
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0) << std::strerror(errno);
  if (pid == 0) {
    ::alarm(60);
    FileStore store(dir_);
    // The child first waits for the parent, so the parent's wait below
    // genuinely starts before the key exists.
    bool ok = store.wait_get("parent/ready", absl::Seconds(30)).ok() &&
              store.set("child/answer", absl::StrCat("from ", ::getpid())).ok();
    exit_child(ok);
  }
  FileStore store(dir_);
  EXPECT_EQ(store.wait_get("child/answer", absl::ZeroDuration()).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  ASSERT_TRUE(store.set("parent/ready", "yes").ok());
  auto v = store.wait_get("child/answer", absl::Seconds(30));
  EXPECT_EQ(wait_child(pid), 0);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, absl::StrCat("from ", pid));
}

// One rank of a two-process group: allreduces (fp32 sum) buffers of several
// sizes in which rank r holds (r + 1) * (i % 7 + 1), checks each against the
// closed form, and leaves only after both ranks are done. Returns whether all
// went right; failures are printed.
bool run_rank(const std::string& dir, int rank, int size) {
  FileStore store(dir);
  auto transport = make_transport("tcp", options_with(kToken, absl::StrCat("rank ", rank)));
  if (!transport.ok()) {
    ADD_FAILURE() << "rank " << rank << ": " << transport.status();
    return false;
  }
  auto comm = Communicator::create(**transport, store,
                                   {.rank = rank,
                                    .size = size,
                                    .group = "fork-allreduce",
                                    .listen_address = "tcp://127.0.0.1:0",
                                    .timeout = absl::Seconds(30)});
  if (!comm.ok()) {
    ADD_FAILURE() << "rank " << rank << ": " << comm.status();
    return false;
  }
  bool ok = true;
  const float ranks_sum = static_cast<float>(size * (size + 1) / 2);
  for (size_t count : {size_t{1}, size_t{1000}, (size_t{1} << 20) + 3}) {
    std::vector<float> data(count);
    for (size_t i = 0; i < count; ++i)
      data[i] = static_cast<float>((rank + 1) * static_cast<int>(i % 7 + 1));
    absl::Status s = allreduce(**comm, DType::kFloat32, ReduceOp::kSum, data.data(), count);
    if (!s.ok()) {
      ADD_FAILURE() << "rank " << rank << " count " << count << ": " << s;
      return false;
    }
    for (size_t i = 0; i < count && ok; ++i) {
      float expected = static_cast<float>(i % 7 + 1) * ranks_sum;
      if (data[i] != expected) {
        ADD_FAILURE() << "rank " << rank << " count " << count << ": element " << i << " is "
                      << data[i] << ", expected " << expected;
        ok = false;
      }
    }
  }
  // Stay connected until both ranks are done: one that tears its transport
  // down at once could cut the other's last frames short.
  ok = store.set(absl::StrCat("done/", rank), "").ok() && ok;
  for (int peer = 0; peer < size; ++peer)
    ok = store.wait_get(absl::StrCat("done/", peer), absl::Seconds(30)).ok() && ok;
  return ok;
}

TEST_F(FileStoreTest, TwoProcessAllreduceOverTcpMeetsThroughTheStore) {
  // Fork before this process starts any transport thread.
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0) << std::strerror(errno);
  if (pid == 0) {
    ::alarm(120);
    exit_child(run_rank(dir_, 1, 2));
  }
  bool parent_ok = run_rank(dir_, 0, 2);
  EXPECT_TRUE(parent_ok);
  EXPECT_EQ(wait_child(pid), 0) << "rank 1 (the child) failed; its messages are above";
}

}  // namespace
}  // namespace troupe::transport::testing
