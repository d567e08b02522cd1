// The file Env's one atomic write, as checkpoints and model files use it and
// as the head's state directory does (private files): whole or not at all,
// and never through a link another user planted.
#include "core/io/env.h"

#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace troupe::io {
namespace {

namespace fs = std::filesystem;

// Records the files opened for writing; fails the k-th sync (from 0) if asked.
class RecordingEnv : public EnvWrapper {
 public:
  RecordingEnv() : EnvWrapper(Env::posix()) {}

  absl::StatusOr<std::unique_ptr<WritableFile>> new_writable_file(
      const std::string& path, const WriteOptions& options) override {
    opened.push_back(path);
    absl::StatusOr<std::unique_ptr<WritableFile>> f = target()->new_writable_file(path, options);
    if (!f.ok() || !fail_sync) return f;
    return std::unique_ptr<WritableFile>(new FailingSync(*std::move(f)));
  }

  std::vector<std::string> opened;
  bool fail_sync = false;

 private:
  class FailingSync : public WritableFile {
   public:
    explicit FailingSync(std::unique_ptr<WritableFile> f) : f_(std::move(f)) {}
    absl::Status append(const void* data, size_t n) override { return f_->append(data, n); }
    absl::Status sync() override { return absl::InternalError("fdatasync: injected"); }
    absl::Status close() override { return f_->close(); }

   private:
    std::unique_ptr<WritableFile> f_;
  };
};

class IoEnvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char path[] = "/tmp/troupe-io-env-test-XXXXXX";
    ASSERT_NE(::mkdtemp(path), nullptr);
    dir_ = path;
  }
  void TearDown() override { fs::remove_all(dir_); }

  static std::string read(const std::string& path) {
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  static unsigned mode(const std::string& path) {
    struct stat st {};
    EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
    return st.st_mode & 0777;
  }
  static absl::Status write(Env* env, const std::string& path, const std::string& text,
                            const WriteOptions& options = {}) {
    return write_file_atomically(env, path, text.data(), text.size(), options);
  }

  std::string dir_;
};

TEST_F(IoEnvTest, WritesAndReplacesAFileWholeThroughPathTmp) {
  RecordingEnv env;
  const std::string path = dir_ + "/latest";
  ASSERT_TRUE(write(&env, path, "one").ok());
  ASSERT_TRUE(write(&env, path, "two").ok());
  EXPECT_EQ(read(path), "two");
  // Checkpoints' temporary name (their fault tests and cleanup know it).
  EXPECT_EQ(env.opened, std::vector<std::string>({path + ".tmp", path + ".tmp"}));
  EXPECT_EQ(std::vector<fs::path>(fs::directory_iterator(dir_), {}),
            std::vector<fs::path>({fs::path(path)}));
}

TEST_F(IoEnvTest, AFailedWriteLeavesTheOldFileAndRemovesItsTemporary) {
  const std::string path = dir_ + "/manifest.json";
  ASSERT_TRUE(write(Env::posix(), path, "old").ok());
  for (bool private_file : {false, true}) {
    RecordingEnv env;
    env.fail_sync = true;
    absl::Status s = write(&env, path, "new", {.private_file = private_file});
    EXPECT_TRUE(absl::IsInternal(s)) << s;
    EXPECT_EQ(read(path), "old");
    ASSERT_EQ(env.opened.size(), 1u);
    EXPECT_FALSE(fs::exists(env.opened[0])) << env.opened[0];
  }
  // The callback's error is the write's.
  absl::Status refused = write_file_atomically(
      Env::posix(), path, [](WritableFile&) { return absl::InvalidArgumentError("no"); });
  EXPECT_TRUE(absl::IsInvalidArgument(refused)) << refused;
  EXPECT_EQ(read(path), "old");
  EXPECT_TRUE(absl::IsNotFound(write(Env::posix(), dir_ + "/missing/file", "x")));
}

TEST_F(IoEnvTest, APrivateFileIsMode0600UnderAnyUmaskInATemporaryOfThisProcess) {
  RecordingEnv env;
  const std::string path = dir_ + "/head_address";
  const mode_t umask_was = ::umask(0);
  absl::Status s = write(&env, path, "127.0.0.1:1\n", {.private_file = true});
  ::umask(umask_was);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(read(path), "127.0.0.1:1\n");
  EXPECT_EQ(mode(path), 0600u);
  EXPECT_EQ(env.opened, std::vector<std::string>({absl::StrCat(path, ".", ::getpid(), ".tmp")}));
}

TEST_F(IoEnvTest, APrivateWriteFollowsNoLinkAtThePathOrItsTemporary) {
  const std::string victim = dir_ + "/victim";
  std::ofstream(victim) << "precious\n";
  ::chmod(victim.c_str(), 0644);
  const std::string path = dir_ + "/token";
  // A link planted at this process's temporary name is removed, not written through.
  const std::string tmp = absl::StrCat(path, ".", ::getpid(), ".tmp");
  ASSERT_EQ(::symlink(victim.c_str(), tmp.c_str()), 0);
  ASSERT_EQ(::symlink(victim.c_str(), path.c_str()), 0);
  ASSERT_TRUE(write(Env::posix(), path, "secret\n", {.private_file = true}).ok());
  EXPECT_EQ(read(victim), "precious\n");
  EXPECT_EQ(mode(victim), 0644u);
  EXPECT_FALSE(fs::is_symlink(path));  // the link itself was replaced
  EXPECT_EQ(read(path), "secret\n");
  EXPECT_FALSE(fs::exists(fs::symlink_status(tmp)));

  // Created exclusively: never an existing file, nor a link.
  absl::StatusOr<std::unique_ptr<WritableFile>> existing =
      Env::posix()->new_writable_file(path, {.private_file = true});
  EXPECT_TRUE(absl::IsAlreadyExists(existing.status())) << existing.status();
  const std::string link = dir_ + "/link";
  ASSERT_EQ(::symlink((dir_ + "/nowhere").c_str(), link.c_str()), 0);
  absl::StatusOr<std::unique_ptr<WritableFile>> linked =
      Env::posix()->new_writable_file(link, {.private_file = true});
  EXPECT_TRUE(absl::IsAlreadyExists(linked.status())) << linked.status();
  EXPECT_FALSE(fs::exists(dir_ + "/nowhere"));
}

}  // namespace
}  // namespace troupe::io
