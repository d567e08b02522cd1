// Token files as users hand them to workers and drivers (--token-file):
// each wrong one is refused saying what is wrong with it.
#include "transport/auth.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace troupe::transport {
namespace {

class TokenFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char path[] = "/tmp/troupe-token-test-XXXXXX";
    ASSERT_NE(::mkdtemp(path), nullptr);
    dir_ = path;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

TEST_F(TokenFileTest, ReadsTheTokenWithoutSurroundingWhitespace) {
  std::string path = dir_ + "/token";
  std::string token = generate_token();
  std::ofstream(path) << "  " << token << "\n";
  absl::StatusOr<std::string> read = read_token_file(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, token);
}

TEST_F(TokenFileTest, EachWrongFileIsRefusedSayingWhy) {
  auto message = [](const absl::StatusOr<std::string>& r) {
    return std::string(r.status().message());
  };
  absl::StatusOr<std::string> missing = read_token_file(dir_ + "/absent");
  EXPECT_TRUE(absl::IsNotFound(missing.status()));
  absl::StatusOr<std::string> directory = read_token_file(dir_);
  EXPECT_TRUE(absl::IsInvalidArgument(directory.status()));
  EXPECT_NE(message(directory).find("is a directory"), std::string::npos) << message(directory);
  std::ofstream(dir_ + "/empty") << "\n\n";
  absl::StatusOr<std::string> empty = read_token_file(dir_ + "/empty");
  EXPECT_NE(message(empty).find("is empty"), std::string::npos) << message(empty);
  std::ofstream(dir_ + "/big") << std::string(kMaxTokenFileBytes + 1, 'a');
  absl::StatusOr<std::string> big = read_token_file(dir_ + "/big");
  EXPECT_TRUE(absl::IsInvalidArgument(big.status()));
  EXPECT_NE(message(big).find("too large"), std::string::npos) << message(big);
  // A device that never ends is no token file either.
  absl::StatusOr<std::string> zero = read_token_file("/dev/zero");
  EXPECT_TRUE(absl::IsInvalidArgument(zero.status())) << zero.status();
}

}  // namespace
}  // namespace troupe::transport
