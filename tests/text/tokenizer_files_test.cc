// Opening tokenizers by spec, and a tokenizer saved beside a model: the same vocabulary comes
// back, an altered one is refused.
#include "text/tokenizer_files.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tests/text/text_test_data.h"
#include "text/parallel_encode.h"

namespace troupe::text {
namespace {

TEST(OpenTokenizerTest, BytesAndErrors) {
  auto bytes = open_tokenizer("bytes");
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ((*bytes)->id(), "bytes");
  EXPECT_EQ((*bytes)->vocab_size(), 256);
  EXPECT_EQ((*bytes)->encode("hi"), (std::vector<int32_t>{104, 105}));
  EXPECT_EQ(open_tokenizer("wordpiece:x").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(open_tokenizer("gpt2:").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(open_tokenizer("gpt2:/nonexistent").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(tokenizer_kind("gpt2-0123456789"), "gpt2");
  EXPECT_EQ(tokenizer_kind("sentencepiece:/a/b.model"), "sentencepiece");
  EXPECT_EQ(tokenizer_kind("bytes"), "bytes");
}

TEST(LineCutsTest, CutsOnlyAfterANewlineBeforeAPrintableCharacter) {
  const std::string text = "ab\ncd\n  ef\n\ngh\n\tij\nkl";
  for (size_t cut : line_cuts(text, 1)) {
    EXPECT_EQ(text[cut - 1], '\n');
    EXPECT_NE(text[cut], ' ');
    EXPECT_NE(text[cut], '\n');
    EXPECT_NE(text[cut], '\t');
  }
  EXPECT_EQ(line_cuts(text, 1), (std::vector<size_t>{3, 12, 19}));
  EXPECT_TRUE(line_cuts(text, 1000).empty());
}

TEST(SavedTokenizerTest, SavedBesideAModelAndRefusedWhenAltered) {
  const std::string gpt2 = testing::data_dir() + "/tokenizers/gpt2";
  if (!std::filesystem::exists(gpt2 + "/vocab.bpe")) {
    GTEST_SKIP() << "GPT-2's files are not in " << gpt2 << ": scripts/fetch_text.sh fetches them";
  }
  auto tok = open_tokenizer("gpt2:" + gpt2);
  ASSERT_TRUE(tok.ok()) << tok.status();
  const std::string dir = ::testing::TempDir() + "/saved_tokenizer";
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(save_tokenizer(**tok, dir).ok());
  auto back = open_saved_tokenizer(dir, (*tok)->id());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ((*back)->encode("To be, or not to be"), (*tok)->encode("To be, or not to be"));

  auto other = open_saved_tokenizer(dir, "gpt2-0000000000");
  ASSERT_EQ(other.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(other.status().message().find("gpt2-0000000000"), std::string::npos);

  // One merge dropped: another vocabulary, named as such.
  std::string merges = testing::read_all(dir + "/vocab.bpe");
  merges.erase(merges.rfind('\n', merges.size() - 2) + 1);
  std::ofstream(dir + "/vocab.bpe", std::ios::trunc) << merges;
  auto altered = open_saved_tokenizer(dir, (*tok)->id());
  ASSERT_FALSE(altered.ok());
  EXPECT_NE(altered.status().message().find(dir), std::string::npos) << altered.status();

  EXPECT_EQ(open_saved_tokenizer(dir + "/none", (*tok)->id()).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_TRUE(open_saved_tokenizer(dir + "/none", "bytes").ok());
}

}  // namespace
}  // namespace troupe::text
