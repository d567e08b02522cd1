// GPT-2's byte-level BPE against tiktoken's ids for the same files: the torture text and every
// work of the Shakespeare corpus (scripts/fetch_text.sh), id for id, and decode(encode(x)) == x.
#include "text/gpt2_tokenizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/text/text_test_data.h"
#include "text/parallel_encode.h"

namespace troupe::text {
namespace {

using testing::data_dir;
using testing::fixture_dir;
using testing::read_all;

std::string gpt2_dir() {
  return data_dir() + "/tokenizers/gpt2";
}

class Gpt2TokenizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(gpt2_dir() + "/encoder.json")) {
      GTEST_SKIP() << "GPT-2's files are not in " << gpt2_dir()
                   << ": scripts/fetch_text.sh fetches them";
    }
    auto tok = Gpt2Tokenizer::open(gpt2_dir());
    ASSERT_TRUE(tok.ok()) << tok.status();
    tok_ = std::move(*tok);
  }
  std::unique_ptr<Gpt2Tokenizer> tok_;
};

TEST_F(Gpt2TokenizerTest, ReadsGpt2sVocabulary) {
  EXPECT_EQ(tok_->kind(), "gpt2");
  EXPECT_EQ(tok_->vocab_size(), 50257);
  EXPECT_EQ(tok_->num_merges(), 50000);
  EXPECT_EQ(tok_->end_of_text(), 50256);
  EXPECT_FALSE(tok_->begin_of_text().has_value());
  EXPECT_EQ(tok_->id().substr(0, 5), "gpt2-");
  EXPECT_EQ(tok_->id().size(), 15u);
  EXPECT_EQ(tok_->encode("Hello world"), (std::vector<int32_t>{15496, 995}));
  EXPECT_EQ(tok_->encode(" the cat's"), (std::vector<int32_t>{262, 3797, 338}));
  EXPECT_TRUE(tok_->encode("").empty());
  EXPECT_EQ(tok_->decode(std::vector<int32_t>{15496, 995}), "Hello world");
}

TEST_F(Gpt2TokenizerTest, MatchesTiktokenIdForIdOnTheTortureText) {
  const std::string text = read_all(fixture_dir() + "/torture.txt");
  ASSERT_GT(text.size(), 1000u);
  const std::vector<int32_t> expected = testing::read_ids(fixture_dir() + "/torture_gpt2_ids.txt");
  const std::vector<int32_t> ids = tok_->encode(text);
  const int64_t at = testing::first_difference(ids, expected);
  EXPECT_EQ(at, -1) << "first difference at id " << at << " of " << expected.size() << ": "
                    << (at >= 0 && at < static_cast<int64_t>(ids.size()) ? ids[at] : -1)
                    << " instead of "
                    << (at >= 0 && at < static_cast<int64_t>(expected.size()) ? expected[at] : -1);
  EXPECT_EQ(tok_->decode(ids), text);
}

TEST_F(Gpt2TokenizerTest, SpecialTokensAreTextUnlessAllowed) {
  const auto refs = testing::read_references(fixture_dir() + "/gpt2_reference.tsv");
  const std::string text = read_all(fixture_dir() + "/torture.txt");
  std::vector<int32_t> ids;
  tok_->encode_with_special(text, &ids);
  ASSERT_TRUE(refs.contains("torture.txt+special"));
  EXPECT_EQ(static_cast<int64_t>(ids.size()), refs.at("torture.txt+special").tokens);
  EXPECT_EQ(testing::ids_sha256(ids), refs.at("torture.txt+special").sha256);
  EXPECT_EQ(tok_->decode(ids), text);

  const std::vector<int32_t> plain = tok_->encode("<|endoftext|>");
  EXPECT_GT(plain.size(), 1u);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 50256), 0);
  EXPECT_EQ(tok_->decode(plain), "<|endoftext|>");
  std::vector<int32_t> special;
  tok_->encode_with_special("a<|endoftext|>b", &special);
  EXPECT_EQ(special, (std::vector<int32_t>{64, 50256, 65}));
}

TEST_F(Gpt2TokenizerTest, MatchesTiktokenOnEveryWorkOfTheCorpus) {
  const auto refs = testing::read_references(fixture_dir() + "/gpt2_reference.tsv");
  const std::string corpus = data_dir() + "/shakespeare";
  int works = 0;
  int64_t tokens = 0;
  for (const auto& [name, ref] : refs) {
    if (name.starts_with("torture")) continue;
    const std::string text = read_all(corpus + "/" + name);
    ASSERT_EQ(static_cast<int64_t>(text.size()), ref.bytes) << name;
    // The parallel encoder cuts at line starts; its ids must be encode's (and tiktoken's).
    const std::vector<int32_t> ids = encode_parallel(*tok_, text, 2);
    EXPECT_EQ(static_cast<int64_t>(ids.size()), ref.tokens) << name;
    EXPECT_EQ(testing::ids_sha256(ids), ref.sha256) << name;
    EXPECT_EQ(tok_->decode(ids), text) << name;
    ++works;
    tokens += static_cast<int64_t>(ids.size());
  }
  EXPECT_EQ(works, 42);
  std::printf("42 works, %lld tokens, all tiktoken's\n", static_cast<long long>(tokens));
}

TEST_F(Gpt2TokenizerTest, AnyBytesRoundTrip) {
  std::string bytes;
  for (int b = 0; b < 256; ++b)
    bytes.push_back(static_cast<char>(b));
  bytes += "\xff\xfe invalid \xc3( utf-8 \xe2\x82 end";
  const std::vector<int32_t> ids = tok_->encode(bytes);
  EXPECT_EQ(tok_->decode(ids), bytes);
  for (int32_t id : ids)
    EXPECT_TRUE(id >= 0 && id < 50256) << id;
  EXPECT_EQ(tok_->decode(std::vector<int32_t>{15496, 60000, -1}), "Hello<|60000|><|-1|>");
}

TEST_F(Gpt2TokenizerTest, HuggingFaceNamesAndTokenizerJsonGiveTheSameVocabulary) {
  const std::string dir = ::testing::TempDir() + "/gpt2_hf";
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(gpt2_dir() + "/encoder.json", dir + "/vocab.json",
                             std::filesystem::copy_options::overwrite_existing);
  std::filesystem::copy_file(gpt2_dir() + "/vocab.bpe", dir + "/merges.txt",
                             std::filesystem::copy_options::overwrite_existing);
  auto hf = Gpt2Tokenizer::open(dir);
  ASSERT_TRUE(hf.ok()) << hf.status();
  EXPECT_EQ((*hf)->id(), tok_->id());

  // A tokenizer.json as Hugging Face writes GPT-2's (merges as "a b" strings).
  nlohmann::json json = {
      {"version", "1.0"},
      {"added_tokens", {{{"id", 50256}, {"content", "<|endoftext|>"}, {"special", true}}}},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"model",
       {{"type", "BPE"},
        {"vocab", nlohmann::json::parse(read_all(gpt2_dir() + "/encoder.json"))},
        {"merges", nlohmann::json::array()}}}};
  const std::string merges = read_all(gpt2_dir() + "/vocab.bpe");
  size_t at = merges.find('\n') + 1;  // past "#version: 0.2"
  while (at < merges.size()) {
    size_t end = merges.find('\n', at);
    if (end == std::string::npos) end = merges.size();
    if (end > at) json["model"]["merges"].push_back(merges.substr(at, end - at));
    at = end + 1;
  }
  std::ofstream(dir + "/tokenizer.json") << json.dump();
  auto from_json = Gpt2Tokenizer::open(dir + "/tokenizer.json");
  ASSERT_TRUE(from_json.ok()) << from_json.status();
  EXPECT_EQ((*from_json)->id(), tok_->id());
  const std::string text = read_all(fixture_dir() + "/torture.txt");
  EXPECT_EQ((*from_json)->encode(text), tok_->encode(text));
}

TEST(Gpt2TokenizerFilesTest, MissingOrAlteredFilesAreNamed) {
  const std::string dir = ::testing::TempDir() + "/gpt2_bad";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  auto none = Gpt2Tokenizer::open(dir);
  ASSERT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(none.status().message().find("encoder.json"), std::string::npos);

  // A vocabulary of the 256 bytes (as GPT-2 maps them: printable ASCII stands for itself) and a
  // merge whose result is missing.
  nlohmann::json encoder = nlohmann::json::object();
  for (int b = 0; b < 256; ++b)
    encoder[map_bytes(std::string(1, static_cast<char>(b)))] = b;
  encoder["ab"] = 256;
  std::ofstream(dir + "/encoder.json") << encoder.dump();
  std::ofstream(dir + "/vocab.bpe") << "#version: 0.2\na b\nab c\n";
  auto bad = Gpt2Tokenizer::open(dir);
  ASSERT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("vocab.bpe"), std::string::npos) << bad.status();
  EXPECT_NE(bad.status().message().find("merge 2"), std::string::npos) << bad.status();

  std::ofstream(dir + "/vocab.bpe") << "#version: 0.2\na b\n";
  auto good = Gpt2Tokenizer::open(dir);
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_EQ((*good)->vocab_size(), 257);
  EXPECT_EQ((*good)->encode("abc ab"), (std::vector<int32_t>{256, 'c', ' ', 256}));

  std::ofstream(dir + "/encoder.json") << "[1, 2]";
  auto not_object = Gpt2Tokenizer::open(dir);
  ASSERT_EQ(not_object.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(not_object.status().message().find("encoder.json"), std::string::npos);
}

}  // namespace
}  // namespace troupe::text
