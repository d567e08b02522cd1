// The head's state directory and the ids it keeps there: what a restarted
// head relies on, and what an attacker sharing the machine must not bend.
#include "core/cluster/detail/state_dir.h"

#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "core/cluster/detail/head_ids.h"

namespace troupe::cluster {
namespace {

class StateDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char path[] = "/tmp/troupe-state-test-XXXXXX";
    ASSERT_NE(::mkdtemp(path), nullptr);
    root_ = path;
    dir_ = root_ + "/state";
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  static std::string read(const std::string& path) {
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

  std::string root_, dir_;
};

TEST_F(StateDirTest, CreatesAPrivateDirectoryAndKeepsTheToken) {
  ASSERT_TRUE(prepare_state_dir(dir_).ok());
  struct stat st {};
  ASSERT_EQ(::stat(dir_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  bool fresh = false;
  absl::StatusOr<std::string> token = load_or_create_token(dir_, &fresh);
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_TRUE(fresh);
  EXPECT_EQ(token->size(), 64u);
  ASSERT_EQ(::stat((dir_ + "/token").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  // A head started again on the directory keeps it.
  absl::StatusOr<std::string> again = load_or_create_token(dir_, &fresh);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE(fresh);
  EXPECT_EQ(*again, *token);
}

TEST_F(StateDirTest, RefusesAnEmptyPathASymlinkAndAWritableDirectory) {
  EXPECT_TRUE(absl::IsInvalidArgument(prepare_state_dir("")));
  ASSERT_TRUE(prepare_state_dir(dir_).ok());
  std::string link = root_ + "/link";
  ASSERT_EQ(::symlink(dir_.c_str(), link.c_str()), 0);
  absl::Status linked = prepare_state_dir(link);
  EXPECT_TRUE(absl::IsPermissionDenied(linked)) << linked;
  EXPECT_NE(linked.message().find("symbolic link"), std::string::npos) << linked;
  ASSERT_EQ(::chmod(dir_.c_str(), 0777), 0);
  absl::Status open = prepare_state_dir(dir_);
  EXPECT_TRUE(absl::IsPermissionDenied(open)) << open;
  EXPECT_NE(open.message().find("writable by others (mode 0777)"), std::string::npos) << open;
  EXPECT_NE(open.message().find("chmod 700"), std::string::npos) << open;
  ASSERT_EQ(::chmod(dir_.c_str(), 0720), 0);  // group-writable
  EXPECT_TRUE(absl::IsPermissionDenied(prepare_state_dir(dir_)));
  std::string file = root_ + "/file";
  std::ofstream(file) << "x";
  EXPECT_TRUE(absl::IsPermissionDenied(prepare_state_dir(file)));
}

TEST_F(StateDirTest, APlantedTokenSymlinkIsRefusedAndItsTargetUntouched) {
  ASSERT_TRUE(prepare_state_dir(dir_).ok());
  std::string victim = root_ + "/victim";
  std::ofstream(victim) << "precious\n";
  ::chmod(victim.c_str(), 0644);
  ASSERT_EQ(::symlink(victim.c_str(), (dir_ + "/token").c_str()), 0);
  bool fresh = false;
  absl::StatusOr<std::string> token = load_or_create_token(dir_, &fresh);
  EXPECT_TRUE(absl::IsPermissionDenied(token.status())) << token.status();
  EXPECT_NE(token.status().message().find("symbolic link"), std::string::npos) << token.status();
  EXPECT_EQ(read(victim), "precious\n");
  struct stat st {};
  ASSERT_EQ(::stat(victim.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
}

TEST_F(StateDirTest, ATokenOthersCanReadOrThatIsNoTokenIsRefused) {
  ASSERT_TRUE(prepare_state_dir(dir_).ok());
  std::string path = dir_ + "/token";
  std::ofstream(path) << std::string(64, 'a') << "\n";
  ::chmod(path.c_str(), 0644);
  bool fresh = false;
  absl::StatusOr<std::string> token = load_or_create_token(dir_, &fresh);
  EXPECT_TRUE(absl::IsPermissionDenied(token.status())) << token.status();
  EXPECT_NE(token.status().message().find("chmod 600"), std::string::npos) << token.status();
  ::chmod(path.c_str(), 0600);
  EXPECT_TRUE(load_or_create_token(dir_, &fresh).ok());
  std::ofstream(path) << "not a token\n";
  EXPECT_TRUE(absl::IsInvalidArgument(load_or_create_token(dir_, &fresh).status()));
  std::filesystem::remove(path);
  std::filesystem::create_directory(path);
  EXPECT_TRUE(absl::IsPermissionDenied(load_or_create_token(dir_, &fresh).status()));
}

TEST_F(StateDirTest, StateFilesAreReplacedWholeAndNeverThroughASymlink) {
  ASSERT_TRUE(prepare_state_dir(dir_).ok());
  ASSERT_TRUE(write_state_file(dir_, "head_address", "127.0.0.1:1\n").ok());
  ASSERT_TRUE(write_state_file(dir_, "head_address", "127.0.0.1:2\n").ok());
  EXPECT_EQ(*read_state_file(dir_, "head_address"), "127.0.0.1:2\n");
  struct stat st {};
  ASSERT_EQ(::stat((dir_ + "/head_address").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir_), {}), 1);  // no temporary
  std::string victim = root_ + "/victim";
  std::ofstream(victim) << "precious\n";
  std::filesystem::remove(dir_ + "/head_address");
  ASSERT_EQ(::symlink(victim.c_str(), (dir_ + "/head_address").c_str()), 0);
  EXPECT_TRUE(absl::IsPermissionDenied(read_state_file(dir_, "head_address").status()));
  // Writing replaces the link itself, not what it points to.
  ASSERT_TRUE(write_state_file(dir_, "head_address", "127.0.0.1:3\n").ok());
  EXPECT_EQ(read(victim), "precious\n");
  EXPECT_EQ(*read_state_file(dir_, "head_address"), "127.0.0.1:3\n");
  EXPECT_TRUE(absl::IsNotFound(read_state_file(dir_, "absent").status()));
  remove_state_file(dir_, "head_address");
  EXPECT_TRUE(absl::IsNotFound(read_state_file(dir_, "head_address").status()));
}

TEST_F(StateDirTest, WriteErrorsAreErrors) {
  absl::Status s = write_state_file(root_ + "/missing", "x", "y");
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("cannot replace " + root_ + "/missing/x"), std::string::npos) << s;
}

TEST_F(StateDirTest, ARestartedHeadNeverHandsOutAnIdTwice) {
  ASSERT_TRUE(prepare_state_dir(dir_).ok());
  std::set<uint32_t> nodes;
  std::set<uint64_t> actors, groups;
  for (int start = 0; start < 3; ++start) {
    absl::StatusOr<HeadIds> ids = HeadIds::open(dir_);
    ASSERT_TRUE(ids.ok()) << ids.status();
    for (int i = 0; i < 20; ++i) {
      absl::StatusOr<uint32_t> n = ids->next_node();
      ASSERT_TRUE(n.ok()) << n.status();
      EXPECT_TRUE(nodes.insert(*n).second) << "node " << *n << " twice";
      absl::StatusOr<uint64_t> a = ids->next_actor();
      ASSERT_TRUE(a.ok());
      EXPECT_TRUE(actors.insert(*a).second) << "actor " << *a << " twice";
      absl::StatusOr<uint64_t> g = ids->next_group();
      ASSERT_TRUE(g.ok());
      EXPECT_TRUE(groups.insert(*g).second) << "group " << *g << " twice";
    }
  }
  // An id a rejoining node reports is skipped from then on, also after a restart.
  {
    absl::StatusOr<HeadIds> ids = HeadIds::open(dir_);
    ASSERT_TRUE(ids.ok());
    ASSERT_TRUE(ids->saw_actor(1000000).ok());
    EXPECT_GT(*ids->next_actor(), 1000000u);
  }
  absl::StatusOr<HeadIds> ids = HeadIds::open(dir_);
  ASSERT_TRUE(ids.ok());
  EXPECT_GT(*ids->next_actor(), 1000000u);
}

TEST_F(StateDirTest, MalformedIdsFileIsRefusedNamingTheLine) {
  ASSERT_TRUE(prepare_state_dir(dir_).ok());
  ASSERT_TRUE(write_state_file(dir_, "head_ids", "node 5\nactor -3\n").ok());
  absl::StatusOr<HeadIds> ids = HeadIds::open(dir_);
  EXPECT_TRUE(absl::IsInvalidArgument(ids.status())) << ids.status();
  EXPECT_NE(ids.status().message().find("'actor -3'"), std::string::npos) << ids.status();
}

TEST_F(StateDirTest, NodeIndicesRunOutWithAClearError) {
  ASSERT_TRUE(prepare_state_dir(dir_).ok());
  ASSERT_TRUE(write_state_file(dir_, "head_ids", "node 65533\n").ok());
  absl::StatusOr<HeadIds> ids = HeadIds::open(dir_);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(*ids->next_node(), 65533u);  // kLastNode
  absl::StatusOr<uint32_t> none = ids->next_node();
  EXPECT_TRUE(absl::IsResourceExhausted(none.status())) << none.status();
  EXPECT_NE(none.status().message().find("fresh --state-dir"), std::string::npos);
}

}  // namespace
}  // namespace troupe::cluster
