// `troupe data`: prepare, synth, info and convert on temporary directories,
// with their exit codes (0 done, 1 failed, 2 usage) and the files they write.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdlib>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "actors/data/addition_task.h"
#include "actors/data/token_dataset.h"
#include "text/byte_tokenizer.h"
#include "trainers/data_command.h"

namespace troupe::trainers {
namespace {

using actors::TokenDataset;

class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "troupe-data-XXXXXX").string();
    EXPECT_NE(::mkdtemp(pattern.data()), nullptr);
    path_ = pattern;
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string path(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

std::string decoded(const TokenDataset& data) {
  std::vector<int32_t> tokens(static_cast<size_t>(data.num_tokens()));
  EXPECT_TRUE(data.read_tokens(0, data.num_tokens(), tokens.data()).ok());
  return text::ByteTokenizer::decode(tokens);
}

// Runs the command with stdout and stderr captured.
struct Outcome {
  int code;
  std::string out;
  std::string err;
};

Outcome run(const std::vector<std::string>& args) {
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  int code = data_command(args);
  std::string out = ::testing::internal::GetCapturedStdout();
  std::string err = ::testing::internal::GetCapturedStderr();
  return {code, out, err};
}

TEST(DataCommandTest, PrepareHoldsOutWholeFilesForValidation) {
  TempDir dir;
  write_text(dir.path("a.txt"), "first work\n");
  write_text(dir.path("b.txt"), "second work\n");
  write_text(dir.path("c.txt"), "third\n");
  // b.txt is among the inputs and held out: it goes to the validation set only.
  Outcome r =
      run({"prepare", "--output", dir.path("d"), "--val-files",
           dir.path("b.txt") + "," + dir.path("c.txt"), dir.path("a.txt"), dir.path("b.txt")});
  ASSERT_EQ(r.code, 0) << r.err;
  auto train = TokenDataset::open(dir.path("d"));
  auto val = TokenDataset::open(dir.path("d_val"));
  ASSERT_TRUE(train.ok()) << train.status();
  ASSERT_TRUE(val.ok()) << val.status();
  EXPECT_EQ(decoded(*train), "first work\n");
  EXPECT_EQ(decoded(*val), "second work\nthird\n");
  EXPECT_EQ(train->header().text_bytes, 11);
  EXPECT_EQ(val->header().text_bytes, 18);
  EXPECT_NE(r.out.find("held out for validation"), std::string::npos) << r.out;

  // --val-output names the validation prefix; holding out everything leaves nothing to train on.
  ASSERT_EQ(run({"prepare", "--output", dir.path("e"), "--val-output", dir.path("held"),
                 "--val-files", dir.path("c.txt"), dir.path("a.txt")})
                .code,
            0);
  EXPECT_TRUE(TokenDataset::open(dir.path("held")).ok());
  Outcome all = run(
      {"prepare", "--output", dir.path("f"), "--val-files", dir.path("a.txt"), dir.path("a.txt")});
  EXPECT_EQ(all.code, 2);
  EXPECT_NE(all.err.find("nothing is left to train on"), std::string::npos) << all.err;
  Outcome missing = run(
      {"prepare", "--output", dir.path("g"), "--val-files", dir.path("nope"), dir.path("a.txt")});
  EXPECT_EQ(missing.code, 1);
  EXPECT_NE(missing.err.find("nope"), std::string::npos) << missing.err;
  EXPECT_FALSE(std::filesystem::exists(dir.path("g.bin")));
  Outcome bad_tokenizer =
      run({"prepare", "--output", dir.path("h"), "--tokenizer", "wordpiece:x", dir.path("a.txt")});
  EXPECT_EQ(bad_tokenizer.code, 1);
  EXPECT_NE(bad_tokenizer.err.find("wordpiece"), std::string::npos) << bad_tokenizer.err;
}

TEST(DataCommandTest, PrepareWithGpt2sTokenizerStartsEachDocumentWithEndOfText) {
  const char* env = std::getenv("TROUPE_DATA");
  const std::string gpt2 =
      (env && *env ? std::string(env) : std::string(TROUPE_SOURCE_DIR "/data")) +
      "/tokenizers/gpt2";
  if (!std::filesystem::exists(gpt2 + "/encoder.json")) {
    GTEST_SKIP() << "GPT-2's files are not in " << gpt2 << ": scripts/fetch_text.sh fetches them";
  }
  TempDir dir;
  write_text(dir.path("a.txt"), "Hello world");
  write_text(dir.path("b.txt"), " the cat's");
  Outcome r = run({"prepare", "--tokenizer", "gpt2:" + gpt2, "--threads", "2", "--output",
                   dir.path("g"), dir.path("a.txt"), dir.path("b.txt")});
  ASSERT_EQ(r.code, 0) << r.err;
  auto data = TokenDataset::open(dir.path("g"));
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->vocab_size(), 50257);
  EXPECT_EQ(data->header().tokenizer.substr(0, 5), "gpt2-");
  std::vector<int32_t> tokens(static_cast<size_t>(data->num_tokens()));
  ASSERT_TRUE(data->read_tokens(0, data->num_tokens(), tokens.data()).ok());
  EXPECT_EQ(tokens, (std::vector<int32_t>{50256, 15496, 995, 50256, 262, 3797, 338}));
  // The tokenizer's files travel with the dataset.
  EXPECT_TRUE(std::filesystem::exists(dir.path("g.tokenizer/encoder.json")));
  EXPECT_TRUE(std::filesystem::exists(dir.path("g.tokenizer/vocab.bpe")));
}

TEST(DataCommandTest, PrepareConcatenatesFilesInOrder) {
  TempDir dir;
  write_text(dir.path("a.txt"), "hello ");
  write_text(dir.path("b.txt"), "world\n\xff");
  Outcome r = run({"prepare", "--output", dir.path("out"), dir.path("a.txt"), dir.path("b.txt")});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("wrote 13 tokens"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("2 files"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(dir.path("out.bin")), std::string::npos) << r.out;
  auto data = TokenDataset::open(dir.path("out"));
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(decoded(*data), "hello world\n\xff");
  EXPECT_EQ(data->vocab_size(), 256);
  EXPECT_EQ(data->header().tokenizer, "bytes");
  EXPECT_NE(data->header().source.find("a.txt"), std::string::npos);

  // --output=PREFIX, files before the flag, reversed order.
  Outcome again =
      run({"prepare", dir.path("b.txt"), dir.path("a.txt"), "--output=" + dir.path("r")});
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_EQ(decoded(*TokenDataset::open(dir.path("r"))), "world\n\xffhello ");
}

TEST(DataCommandTest, PrepareErrors) {
  TempDir dir;
  write_text(dir.path("a.txt"), "abc");
  Outcome missing =
      run({"prepare", "--output", dir.path("o"), dir.path("a.txt"), dir.path("nope")});
  EXPECT_EQ(missing.code, 1);
  EXPECT_NE(missing.err.find(dir.path("nope")), std::string::npos) << missing.err;
  EXPECT_FALSE(std::filesystem::exists(dir.path("o.bin")));

  Outcome unwritable = run({"prepare", "--output", dir.path("a.txt/o"), dir.path("a.txt")});
  EXPECT_EQ(unwritable.code, 1);
  EXPECT_NE(unwritable.err.find(dir.path("a.txt/o")), std::string::npos) << unwritable.err;

  EXPECT_EQ(run({"prepare", "--output", dir.path("o")}).code, 2);  // no files
  EXPECT_EQ(run({"prepare", dir.path("a.txt")}).code, 2);          // no --output
  Outcome unknown = run({"prepare", "--outptu", "x", dir.path("a.txt")});
  EXPECT_EQ(unknown.code, 2);
  EXPECT_NE(unknown.err.find("unknown flag --outptu"), std::string::npos) << unknown.err;
  Outcome help = run({"prepare", "--help"});
  EXPECT_EQ(help.code, 0);
  EXPECT_NE(help.out.find("usage: troupe data prepare"), std::string::npos);
}

TEST(DataCommandTest, SynthWritesTheTasksStream) {
  TempDir dir;
  Outcome r = run({"synth", "--task", "addition", "--digits", "3", "--samples", "40", "--seq-len",
                   "32", "--seed", "9", "--output", dir.path("add")});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("wrote 40 samples of seq_len 32"), std::string::npos) << r.out;
  auto data = TokenDataset::open(dir.path("add"));
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->num_samples(32), 40);
  auto expected =
      actors::addition_training_tokens({.digits = 3, .num_samples = 40, .seed = 9, .seq_len = 32});
  ASSERT_TRUE(expected.ok());
  EXPECT_EQ(decoded(*data), text::ByteTokenizer::decode(*expected));
  EXPECT_NE(data->header().source.find("digits=3"), std::string::npos);
  // The example line it prints is the stream's first line.
  const std::string text = decoded(*data);
  EXPECT_NE(r.out.find("example line: " + text.substr(0, text.find('\n'))), std::string::npos)
      << r.out;
}

TEST(DataCommandTest, SynthErrors) {
  TempDir dir;
  Outcome unknown = run({"synth", "--task", "multiply", "--output", dir.path("x")});
  EXPECT_EQ(unknown.code, 2);
  EXPECT_NE(unknown.err.find("unknown task 'multiply'"), std::string::npos) << unknown.err;
  Outcome digits = run({"synth", "--digits", "12", "--output", dir.path("x")});
  EXPECT_EQ(digits.code, 2);
  EXPECT_NE(digits.err.find("--digits 12"), std::string::npos) << digits.err;
  EXPECT_EQ(run({"synth", "--samples", "many", "--output", dir.path("x")}).code, 2);
  EXPECT_EQ(run({"synth", "--seed", "-1", "--output", dir.path("x")}).code, 2);
  EXPECT_EQ(run({"synth"}).code, 2);  // no --output
  write_text(dir.path("file"), "x");
  EXPECT_EQ(run({"synth", "--samples", "10", "--output", dir.path("file/x")}).code, 1);
}

TEST(DataCommandTest, InfoPrintsHeaderAndCounts) {
  TempDir dir;
  write_text(dir.path("t.txt"), std::string(1000, 'x'));
  ASSERT_EQ(run({"prepare", "--output", dir.path("t"), dir.path("t.txt")}).code, 0);
  Outcome r = run({"info", dir.path("t"), "--seq-len", "10", "--seq-len=999", "--check"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("num_tokens  1000"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("dtype       uint16"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("samples     99 of seq_len 10"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("samples     1 of seq_len 999"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("check       ok"), std::string::npos) << r.out;
  Outcome defaults = run({"info", dir.path("t")});
  EXPECT_NE(defaults.out.find("samples     0 of seq_len 1024"), std::string::npos) << defaults.out;

  // A header whose vocabulary the tokens exceed: info works, --check fails.
  write_text(dir.path("t.json"),
             R"({"format": "troupe-tokens", "version": 1, "dtype": "uint16", "vocab_size": 100,)"
             R"( "num_tokens": 1000, "tokenizer": "bytes"})");
  EXPECT_EQ(run({"info", dir.path("t")}).code, 0);
  Outcome check = run({"info", "--check", dir.path("t")});
  EXPECT_EQ(check.code, 1);
  EXPECT_NE(check.err.find("token 0 is 120"), std::string::npos) << check.err;

  Outcome missing = run({"info", dir.path("none")});
  EXPECT_EQ(missing.code, 1);
  EXPECT_NE(missing.err.find(dir.path("none.json")), std::string::npos) << missing.err;
  EXPECT_EQ(run({"info"}).code, 2);
  EXPECT_EQ(run({"info", dir.path("t"), "--seq-len", "0"}).code, 2);
}

// A text's bytes to llm.c's GPT-2 file and back to a troupe dataset: the
// same tokens, and info says which format it reads.
TEST(DataCommandTest, ConvertToLlmcAndBack) {
  TempDir dir;
  write_text(dir.path("a.txt"), "To be, or not to be\n");
  ASSERT_EQ(run({"prepare", "--output", dir.path("text"), dir.path("a.txt")}).code, 0);
  Outcome r =
      run({"convert", dir.path("text"), "--to", "llmc-gpt2", "--output", dir.path("x.bin")});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("20 tokens"), std::string::npos) << r.out;
  r = run({"info", dir.path("x.bin")});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("llm.c gpt-2 (magic 20240520, version 1)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("vocab_size  50257"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(1064 bytes)"), std::string::npos) << r.out;  // 1024 + 20 x 2
  r = run({"convert", dir.path("x.bin"), "--to", "troupe", "--output", dir.path("back")});
  ASSERT_EQ(r.code, 0) << r.err;
  auto back = TokenDataset::open(dir.path("back"));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(decoded(*back), "To be, or not to be\n");
  EXPECT_EQ(back->header().tokenizer, "gpt2");  // what llm.c's format says its tokens are
  // Usage errors.
  EXPECT_EQ(run({"convert", dir.path("text"), "--to", "parquet", "--output", "y"}).code, 2);
  EXPECT_EQ(run({"convert", dir.path("text"), "--to", "troupe"}).code, 2);
  EXPECT_EQ(run({"convert", "--to", "troupe", "--output", "y"}).code, 2);
  EXPECT_EQ(run({"convert", dir.path("absent"), "--to", "troupe", "--output", "y"}).code, 1);
}

TEST(DataCommandTest, SubcommandsAndHelp) {
  EXPECT_EQ(run({}).code, 2);
  EXPECT_EQ(run({"--help"}).code, 0);
  Outcome bad = run({"export"});
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("unknown subcommand 'export'"), std::string::npos);
  EXPECT_EQ(run({"synth", "--help"}).code, 0);
  EXPECT_EQ(run({"info", "--help"}).code, 0);
  EXPECT_EQ(run({"convert", "--help"}).code, 0);
}

}  // namespace
}  // namespace troupe::trainers
