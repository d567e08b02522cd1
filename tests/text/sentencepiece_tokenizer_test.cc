// SentencePiece through the library against the sentencepiece Python package's ids for the same
// model (Mistral's v1, a Llama-family vocabulary): the torture text and every Shakespeare work.
#include "text/sentencepiece_tokenizer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/str_replace.h"
#include "tests/text/text_test_data.h"
#include "text/parallel_encode.h"

namespace troupe::text {
namespace {

using testing::data_dir;
using testing::fixture_dir;
using testing::read_all;

std::string model_file() {
  return data_dir() + "/tokenizers/mistral-v1/tokenizer.model";
}

class SentencePieceTokenizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(model_file())) {
      GTEST_SKIP() << model_file() << " is missing: scripts/fetch_text.sh fetches it";
    }
    auto tok = SentencePieceTokenizer::open(model_file());
    ASSERT_TRUE(tok.ok()) << tok.status();
    tok_ = std::move(*tok);
  }
  std::unique_ptr<SentencePieceTokenizer> tok_;
};

TEST_F(SentencePieceTokenizerTest, ReadsTheModel) {
  EXPECT_EQ(tok_->kind(), "sentencepiece");
  EXPECT_EQ(tok_->vocab_size(), 32000);
  EXPECT_EQ(tok_->begin_of_text(), 1);
  EXPECT_EQ(tok_->end_of_text(), 2);
  EXPECT_EQ(tok_->piece(1), "<s>");
  EXPECT_EQ(tok_->id().substr(0, 14), "sentencepiece-");
  EXPECT_FALSE(tok_->splits_at_lines());
  const std::vector<int32_t> ids = tok_->encode("Hello world");
  EXPECT_EQ(tok_->decode(ids), "Hello world");
  std::vector<int32_t> special;
  tok_->encode_with_special("<s>Hi</s>", &special);
  EXPECT_EQ(special.front(), 1);
  EXPECT_EQ(special.back(), 2);
  EXPECT_EQ(tok_->decode(std::vector<int32_t>{32000}), "<|32000|>");
}

TEST_F(SentencePieceTokenizerTest, MatchesThePythonPackageOnTheTortureText) {
  const std::string text = read_all(fixture_dir() + "/torture.txt");
  const std::vector<int32_t> expected =
      testing::read_ids(fixture_dir() + "/torture_sentencepiece_ids.txt");
  const std::vector<int32_t> ids = tok_->encode(text);
  const int64_t at = testing::first_difference(ids, expected);
  EXPECT_EQ(at, -1) << "first difference at id " << at << " of " << expected.size();
  // Byte fallback keeps every character; only the meta symbol U+2581 ("▁", which stands for a
  // space inside the model) comes back as a space.
  const std::string with_spaces = absl::StrReplaceAll(text, {{"\xe2\x96\x81", " "}});
  EXPECT_EQ(tok_->decode(ids), with_spaces);
}

TEST_F(SentencePieceTokenizerTest, MatchesThePythonPackageOnEveryWorkOfTheCorpus) {
  const auto refs = testing::read_references(fixture_dir() + "/sentencepiece_reference.tsv");
  std::vector<std::string> names, texts;
  for (const auto& [name, ref] : refs) {
    if (name.starts_with("torture")) continue;
    names.push_back(name);
    texts.push_back(read_all(data_dir() + "/shakespeare/" + name));
  }
  ASSERT_EQ(names.size(), 42u);
  std::vector<absl::string_view> views(texts.begin(), texts.end());
  // Works encoded side by side on two threads: each must be what one encode gives.
  const std::vector<std::vector<int32_t>> ids = encode_documents(*tok_, views, 2);
  for (size_t i = 0; i < names.size(); ++i) {
    const testing::Reference& ref = refs.at(names[i]);
    EXPECT_EQ(static_cast<int64_t>(texts[i].size()), ref.bytes) << names[i];
    EXPECT_EQ(static_cast<int64_t>(ids[i].size()), ref.tokens) << names[i];
    EXPECT_EQ(testing::ids_sha256(ids[i]), ref.sha256) << names[i];
    EXPECT_EQ(tok_->decode(ids[i]), texts[i]) << names[i];
  }
}

TEST(SentencePieceFilesTest, AMissingOrForeignModelIsNamed) {
  auto missing = SentencePieceTokenizer::open("/nonexistent/tokenizer.model");
  ASSERT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("/nonexistent/tokenizer.model"), std::string::npos);
  const std::string file = ::testing::TempDir() + "/not_a.model";
  std::ofstream(file) << "this is not a protobuf";
  auto foreign = SentencePieceTokenizer::open(file);
  ASSERT_EQ(foreign.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(foreign.status().message().find(file), std::string::npos);
}

}  // namespace
}  // namespace troupe::text
