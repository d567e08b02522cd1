// Token datasets: the file format's round trip in both widths, and every way
// a header or a .bin can be wrong, each named in its error; llm.c's files
// read as they are and written byte for byte as llm.c writes them.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "actors/data/llmc_format.h"
#include "actors/data/nanogpt_format.h"
#include "actors/data/token_dataset.h"
#include "actors/data/token_dataset_writer.h"

namespace troupe::actors {
namespace {

// A fresh directory under TMPDIR, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "troupe-data-XXXXXX").string();
    char* made = ::mkdtemp(pattern.data());
    EXPECT_NE(made, nullptr);
    path_ = pattern;
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string path(const std::string& name) const { return path_ + "/" + name; }
  std::vector<std::string> files() const {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(path_)) {
      names.push_back(e.path().filename().string());
    }
    return names;
  }

 private:
  std::string path_;
};

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::vector<int32_t> read_all(const TokenDataset& data) {
  std::vector<int32_t> tokens(static_cast<size_t>(data.num_tokens()));
  absl::Status s = data.read_tokens(0, data.num_tokens(), tokens.data());
  EXPECT_TRUE(s.ok()) << s;
  return tokens;
}

TEST(TokenDatasetTest, RoundTripUint16) {
  TempDir dir;
  std::vector<int32_t> tokens(1000);
  for (size_t i = 0; i < tokens.size(); ++i)
    tokens[i] = static_cast<int32_t>((i * 37) % 256);
  const std::string prefix = dir.path("small");
  ASSERT_TRUE(write_token_dataset(prefix, tokens, 256, "bytes", "a test").ok());

  EXPECT_EQ(std::filesystem::file_size(prefix + ".bin"), 2000u);
  auto data = TokenDataset::open(prefix);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->header().dtype, TokenDtype::kUint16);
  EXPECT_EQ(data->vocab_size(), 256);
  EXPECT_EQ(data->num_tokens(), 1000);
  EXPECT_EQ(data->header().tokenizer, "bytes");
  EXPECT_EQ(data->header().source, "a test");
  EXPECT_EQ(data->name(), prefix + ".bin");
  EXPECT_EQ(read_all(*data), tokens);
  EXPECT_TRUE(data->check_tokens().ok());
  // Only the two files are left: no temporary files.
  EXPECT_EQ(dir.files().size(), 2u);
}

TEST(TokenDatasetTest, RoundTripUint32) {
  TempDir dir;
  const std::vector<int32_t> tokens = {0, 65535, 65536, 69999, 12345, 1};
  const std::string prefix = dir.path("wide");
  ASSERT_TRUE(write_token_dataset(prefix, tokens, 70000, "custom").ok());
  EXPECT_EQ(std::filesystem::file_size(prefix + ".bin"), 4 * tokens.size());
  auto data = TokenDataset::open(prefix);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->header().dtype, TokenDtype::kUint32);
  EXPECT_EQ(read_all(*data), tokens);
  // The bytes themselves are little-endian.
  const std::string bytes = read_text(prefix + ".bin");
  EXPECT_EQ(static_cast<unsigned char>(bytes[8]), 0x00);  // 65536 = 0x00010000
  EXPECT_EQ(static_cast<unsigned char>(bytes[10]), 0x01);
}

TEST(TokenDatasetTest, DtypeFollowsVocabSize) {
  EXPECT_EQ(dtype_for_vocab(256), TokenDtype::kUint16);
  EXPECT_EQ(dtype_for_vocab(65536), TokenDtype::kUint16);
  EXPECT_EQ(dtype_for_vocab(65537), TokenDtype::kUint32);
}

TEST(TokenDatasetTest, WriterCrossesItsBuffer) {
  TempDir dir;
  std::vector<int32_t> tokens(700000);  // 1.4 MB: more than one buffer
  for (size_t i = 0; i < tokens.size(); ++i)
    tokens[i] = static_cast<int32_t>(i % 50000);
  auto writer = TokenDatasetWriter::create(dir.path("big"), 50000, "ids");
  ASSERT_TRUE(writer.ok()) << writer.status();
  std::span<const int32_t> all(tokens);
  ASSERT_TRUE((*writer)->append(all.subspan(0, 123457)).ok());
  ASSERT_TRUE((*writer)->append(all.subspan(123457)).ok());
  EXPECT_EQ((*writer)->num_tokens(), 700000);
  ASSERT_TRUE((*writer)->finish().ok());
  auto data = TokenDataset::open(dir.path("big"));
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(read_all(*data), tokens);
}

TEST(TokenDatasetTest, SamplesAreShiftedNonOverlappingWindows) {
  std::vector<int32_t> tokens(101);
  std::iota(tokens.begin(), tokens.end(), 0);
  auto data = TokenDataset::from_tokens(tokens, 256);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->num_samples(8), 12);  // (101 - 1) / 8
  EXPECT_EQ(data->num_samples(100), 1);
  EXPECT_EQ(data->num_samples(101), 0);
  EXPECT_EQ(data->num_samples(0), 0);
  std::vector<int32_t> inputs(8), targets(8);
  ASSERT_TRUE(data->read_sample(3, 8, inputs.data(), targets.data()).ok());
  EXPECT_EQ(inputs, (std::vector<int32_t>{24, 25, 26, 27, 28, 29, 30, 31}));
  EXPECT_EQ(targets, (std::vector<int32_t>{25, 26, 27, 28, 29, 30, 31, 32}));
  // The last sample's target is the last token that fits.
  ASSERT_TRUE(data->read_sample(11, 8, inputs.data(), targets.data()).ok());
  EXPECT_EQ(targets.back(), 96);
  EXPECT_EQ(data->read_sample(12, 8, inputs.data(), targets.data()).code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(data->read_sample(-1, 8, inputs.data(), targets.data()).code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(data->read_tokens(100, 2, inputs.data()).code(), absl::StatusCode::kOutOfRange);

  auto empty = TokenDataset::from_tokens({}, 256);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->num_samples(1), 0);
  EXPECT_TRUE(empty->check_tokens().ok());
}

TEST(TokenDatasetTest, FromTokensChecksIds) {
  auto bad = TokenDataset::from_tokens({1, 2, 256}, 256);
  ASSERT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("token 2 is 256"), std::string::npos) << bad.status();
  EXPECT_EQ(TokenDataset::from_tokens({-1}, 256).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TokenDataset::from_tokens({0}, 0).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(TokenDatasetTest, MissingFilesAreNamed) {
  TempDir dir;
  auto none = TokenDataset::open(dir.path("absent"));
  ASSERT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(none.status().message().find(dir.path("absent.json")), std::string::npos)
      << none.status();

  ASSERT_TRUE(write_token_dataset(dir.path("x"), std::vector<int32_t>{1, 2, 3}, 256, "bytes").ok());
  std::filesystem::remove(dir.path("x.bin"));
  auto no_bin = TokenDataset::open(dir.path("x"));
  ASSERT_EQ(no_bin.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(no_bin.status().message().find(dir.path("x.bin")), std::string::npos)
      << no_bin.status();
}

TEST(TokenDatasetTest, TruncatedBinIsASizeMismatch) {
  TempDir dir;
  const std::string prefix = dir.path("t");
  ASSERT_TRUE(write_token_dataset(prefix, std::vector<int32_t>(10, 7), 256, "bytes").ok());
  std::filesystem::resize_file(prefix + ".bin", 19);
  auto data = TokenDataset::open(prefix);
  ASSERT_EQ(data.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string message(data.status().message());
  EXPECT_NE(message.find(prefix + ".bin: 19 bytes"), std::string::npos) << message;
  EXPECT_NE(message.find("10 uint16 tokens (20 bytes)"), std::string::npos) << message;
}

TEST(TokenDatasetTest, ABinTruncatedWhileInUseFailsReadsNamingIt) {
  // As a user overwriting the dataset during a run: the reader's process
  // must see an error, not die of SIGBUS.
  TempDir dir;
  const std::string prefix = dir.path("t");
  ASSERT_TRUE(write_token_dataset(prefix, std::vector<int32_t>(4096, 7), 256, "bytes").ok());
  auto data = TokenDataset::open(prefix);
  ASSERT_TRUE(data.ok()) << data.status();
  std::vector<int32_t> inputs(64), targets(64);
  ASSERT_TRUE(data->read_sample(60, 64, inputs.data(), targets.data()).ok());
  std::filesystem::resize_file(prefix + ".bin", 100);
  absl::Status s = data->read_sample(60, 64, inputs.data(), targets.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find(prefix + ".bin: ends before token 3840"), std::string::npos) << s;
  EXPECT_NE(s.message().find("truncated or replaced while in use"), std::string::npos) << s;
  EXPECT_TRUE(data->read_sample(0, 32, inputs.data(), targets.data()).ok());  // what is left
}

struct BadHeader {
  std::string json;
  std::string expected;  // in the message
};

class TokenDatasetHeaderTest : public ::testing::TestWithParam<BadHeader> {};

TEST_P(TokenDatasetHeaderTest, IsRejectedNamingFileAndKey) {
  TempDir dir;
  const std::string prefix = dir.path("h");
  ASSERT_TRUE(write_token_dataset(prefix, std::vector<int32_t>{1, 2, 3, 4}, 256, "bytes").ok());
  write_text(prefix + ".json", GetParam().json);
  auto data = TokenDataset::open(prefix);
  ASSERT_EQ(data.status().code(), absl::StatusCode::kInvalidArgument) << data.status();
  const std::string message(data.status().message());
  EXPECT_NE(message.find(prefix + ".json"), std::string::npos) << message;
  EXPECT_NE(message.find(GetParam().expected), std::string::npos) << message;
}

INSTANTIATE_TEST_SUITE_P(
    Headers, TokenDatasetHeaderTest,
    ::testing::Values(BadHeader{"{\"format\": \"troupe-tok", "not valid JSON"},
                      BadHeader{"[1, 2]", "JSON object"},
                      BadHeader{
                          R"({"format": "npy", "version": 1, "dtype": "uint16", "vocab_size": 256,
                     "num_tokens": 4, "tokenizer": "bytes"})",
                          "\"format\" is \"npy\""},
                      BadHeader{R"({"format": "troupe-tokens", "version": 2, "dtype": "uint16",
                     "vocab_size": 256, "num_tokens": 4, "tokenizer": "bytes"})",
                                "\"version\" is 2"},
                      BadHeader{R"({"format": "troupe-tokens", "version": 1, "dtype": "uint32",
                     "vocab_size": 256, "num_tokens": 4, "tokenizer": "bytes"})",
                                "\"dtype\" is \"uint32\" but vocab_size 256"},
                      BadHeader{R"({"format": "troupe-tokens", "version": 1, "dtype": "int8",
                     "vocab_size": 256, "num_tokens": 4, "tokenizer": "bytes"})",
                                "\"dtype\" is \"int8\""},
                      BadHeader{R"({"format": "troupe-tokens", "version": 1, "dtype": "uint16",
                     "vocab_size": 256, "tokenizer": "bytes"})",
                                "missing key \"num_tokens\""},
                      BadHeader{R"({"format": "troupe-tokens", "version": 1, "dtype": "uint16",
                     "vocab_size": 256, "num_tokens": "4", "tokenizer": "bytes"})",
                                "\"num_tokens\" must be an integer"},
                      BadHeader{R"({"format": "troupe-tokens", "version": 1, "dtype": "uint16",
                     "vocab_size": 0, "num_tokens": 4, "tokenizer": "bytes"})",
                                "\"vocab_size\" is 0"},
                      BadHeader{R"({"format": "troupe-tokens", "version": 1, "dtype": "uint16",
                     "vocab_size": 256, "num_tokens": -4, "tokenizer": "bytes"})",
                                "\"num_tokens\" is -4"},
                      BadHeader{R"({"format": "troupe-tokens", "version": 1, "dtype": "uint16",
                     "vocab_size": 256, "num_tokens": 18446744073709551615, "tokenizer": "b"})",
                                "\"num_tokens\" is out of range"},
                      BadHeader{R"({"format": "troupe-tokens", "version": 1, "dtype": "uint16",
                     "vocab_size": 256, "num_tokens": 4611686018427387904, "tokenizer": "b"})",
                                "\"num_tokens\" is 4611686018427387904"},
                      BadHeader{R"({"format": "troupe-tokens", "version": 1, "dtype": "uint16",
                     "vocab_size": 256, "num_tokens": 5, "tokenizer": "bytes"})",
                                "h.bin: 8 bytes"}));

TEST(TokenDatasetTest, UnknownHeaderKeysAreIgnored) {
  TempDir dir;
  const std::string prefix = dir.path("extra");
  ASSERT_TRUE(write_token_dataset(prefix, std::vector<int32_t>{1, 2}, 256, "bytes").ok());
  write_text(prefix + ".json", R"({"format": "troupe-tokens", "version": 1, "dtype": "uint16",
      "vocab_size": 256, "num_tokens": 2, "tokenizer": "bytes", "created": "2024-01-01"})");
  auto data = TokenDataset::open(prefix);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->header().source, "");
}

TEST(TokenDatasetTest, TokenOutOfVocabIsDataLossNamingFileAndIndex) {
  TempDir dir;
  const std::string prefix = dir.path("v");
  ASSERT_TRUE(write_token_dataset(prefix, std::vector<int32_t>{1, 2, 3, 200, 4}, 256, "b").ok());
  write_text(prefix + ".json", R"({"format": "troupe-tokens", "version": 1, "dtype": "uint16",
      "vocab_size": 100, "num_tokens": 5, "tokenizer": "b"})");
  auto data = TokenDataset::open(prefix);
  ASSERT_TRUE(data.ok()) << data.status();  // found when read
  std::vector<int32_t> out(5);
  EXPECT_TRUE(data->read_tokens(0, 3, out.data()).ok());
  absl::Status s = data->read_tokens(0, 5, out.data());
  ASSERT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(s.message().find(prefix + ".bin: token 3 is 200"), std::string::npos) << s;
  EXPECT_EQ(data->check_tokens().code(), absl::StatusCode::kDataLoss);
}

TEST(TokenDatasetWriterTest, MakesAMissingDirectoryButNotOneUnderAFile) {
  TempDir dir;
  auto made = TokenDatasetWriter::create(dir.path("new/dir/x"), 256, "bytes");
  ASSERT_TRUE(made.ok()) << made.status();
  std::ofstream(dir.path("file")) << "x";
  auto writer = TokenDatasetWriter::create(dir.path("file/x"), 256, "bytes");
  ASSERT_FALSE(writer.ok());
  EXPECT_NE(writer.status().message().find(dir.path("file/x")), std::string::npos)
      << writer.status();
}

TEST(TokenDatasetWriterTest, UnwritableOutputIsNamedAndLeavesNothing) {
  TempDir dir;
  {
    auto w = TokenDatasetWriter::create(dir.path("half"), 256, "bytes");
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->append(std::vector<int32_t>{1, 2, 3}).ok());
    absl::Status bad = (*w)->append(std::vector<int32_t>{4, 256});
    EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(bad.message().find("token 4 is 256"), std::string::npos) << bad;
    EXPECT_EQ(dir.files().size(), 1u);  // the temporary .bin
  }                                     // destroyed without finish()
  EXPECT_TRUE(dir.files().empty());
  EXPECT_EQ(TokenDatasetWriter::create(dir.path("v"), 0, "bytes").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(TokenDatasetWriterTest, ReplacesAnExistingDataset) {
  TempDir dir;
  const std::string prefix = dir.path("r");
  ASSERT_TRUE(write_token_dataset(prefix, std::vector<int32_t>{1, 2, 3}, 256, "bytes").ok());
  ASSERT_TRUE(write_token_dataset(prefix, std::vector<int32_t>{9, 8}, 256, "bytes").ok());
  auto data = TokenDataset::open(prefix);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(read_all(*data), (std::vector<int32_t>{9, 8}));
}

// An llm.c file as its data_common.py writes one: 256 int32 (magic,
// version, token count, zeros), then the tokens of width T.
template <class T>
std::string llmc_bytes(int32_t magic, int32_t version, const std::vector<T>& tokens,
                       int32_t count = -1) {
  std::vector<int32_t> header(256, 0);
  header[0] = magic;
  header[1] = version;
  header[2] = count >= 0 ? count : static_cast<int32_t>(tokens.size());
  std::string bytes(reinterpret_cast<const char*>(header.data()), header.size() * 4);
  bytes.append(reinterpret_cast<const char*>(tokens.data()), tokens.size() * sizeof(T));
  return bytes;
}

TEST(LlmcFileTest, AGpt2FileIsReadAsItIs) {
  TempDir dir;
  const std::vector<uint16_t> tokens = {50256, 15496, 11, 995, 0, 50256, 7};
  write_text(dir.path("val_000000.bin"), llmc_bytes<uint16_t>(20240520, 1, tokens));
  auto data = TokenDataset::open(dir.path("val_000000.bin"));
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->llmc_format(), LlmcFormat::kGpt2);
  EXPECT_EQ(data->header().dtype, TokenDtype::kUint16);
  EXPECT_EQ(data->vocab_size(), 50257);
  EXPECT_EQ(data->header().tokenizer, "gpt2");
  EXPECT_EQ(read_all(*data), std::vector<int32_t>(tokens.begin(), tokens.end()));
  std::vector<int32_t> inputs(3), targets(3);
  ASSERT_TRUE(data->read_sample(1, 3, inputs.data(), targets.data()).ok());
  EXPECT_EQ(inputs, (std::vector<int32_t>{995, 0, 50256}));
  EXPECT_EQ(targets, (std::vector<int32_t>{0, 50256, 7}));
}

// nanoGPT's prepare.py: train.bin and val.bin are uint16 with no header; GPT-2's ids unless a
// meta.pkl beside them gives a character vocabulary's size.
TEST(NanoGptFileTest, AHeaderlessBinIsGpt2sOrMetaPklsVocabulary) {
  TempDir dir;
  const std::vector<uint16_t> tokens = {15496, 11, 995, 50256, 7, 0};
  write_text(dir.path("train.bin"),
             std::string(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 2));
  auto data = TokenDataset::open(dir.path("train.bin"));
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_FALSE(data->llmc_format().has_value());
  EXPECT_EQ(data->vocab_size(), 50257);
  EXPECT_EQ(data->header().tokenizer, "gpt2");
  EXPECT_EQ(read_all(*data), std::vector<int32_t>(tokens.begin(), tokens.end()));

  // pickle.dumps({"vocab_size": 65, "itos": {...}, "stoi": {...}}), protocol 4: BININT1 65.
  const std::string meta(
      "\x80\x04\x95\xb4\x02\x00\x00\x00\x00\x00\x00}\x94(\x8c\nvocab_size\x94KA"
      "\x8c\x04itos\x94}\x94(K",
      38);
  write_text(dir.path("meta.pkl"), meta);
  const std::vector<uint16_t> chars = {20, 64, 0, 33};
  write_text(dir.path("val.bin"),
             std::string(reinterpret_cast<const char*>(chars.data()), chars.size() * 2));
  auto val = TokenDataset::open(dir.path("val.bin"));
  ASSERT_TRUE(val.ok()) << val.status();
  EXPECT_EQ(val->vocab_size(), 65);
  EXPECT_EQ(val->header().tokenizer, "nanogpt-char");
  EXPECT_TRUE(val->check_tokens().ok());

  EXPECT_EQ(nanogpt_meta_vocab_size(std::string("\x8c\nvocab_size\x94M\xe8\x03", 16)), 1000);
  EXPECT_EQ(nanogpt_meta_vocab_size(std::string("\x8c\nvocab_size\x94Jp\x11\x01\x00", 18)), 70000);
  EXPECT_EQ(nanogpt_meta_vocab_size("no such key"), std::nullopt);

  // An odd size is no uint16 file; a troupe header beside a .bin makes it a troupe dataset's.
  write_text(dir.path("odd.bin"), std::string("abc"));
  auto odd = TokenDataset::open(dir.path("odd.bin"));
  ASSERT_EQ(odd.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(odd.status().message().find("odd.bin"), std::string::npos);
  ASSERT_TRUE(write_token_dataset(dir.path("t"), std::vector<int32_t>{1, 2}, 256, "bytes").ok());
  EXPECT_FALSE(TokenDataset::open(dir.path("t.bin")).ok());  // named by its prefix, "t"
}

TEST(LlmcFileTest, ALlama3FileIsReadAsItIs) {
  TempDir dir;
  const std::vector<uint32_t> tokens = {128000, 9906, 1917, 128001};
  write_text(dir.path("llama.bin"), llmc_bytes<uint32_t>(20240801, 7, tokens));
  auto data = TokenDataset::open(dir.path("llama.bin"));
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->llmc_format(), LlmcFormat::kLlama3);
  EXPECT_EQ(data->header().dtype, TokenDtype::kUint32);
  EXPECT_EQ(data->vocab_size(), 128256);
  EXPECT_EQ(read_all(*data), std::vector<int32_t>(tokens.begin(), tokens.end()));
}

TEST(LlmcFileTest, AWrongVersionOrSizeIsRefusedNamingTheFile) {
  TempDir dir;
  const std::string path = dir.path("x.bin");
  write_text(path, llmc_bytes<uint16_t>(20240520, 2, {1, 2, 3}));
  auto data = TokenDataset::open(path);
  EXPECT_EQ(data.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(data.status().message(), path)) << data.status();
  EXPECT_TRUE(absl::StrContains(data.status().message(), "version 2")) << data.status();
  write_text(path, llmc_bytes<uint16_t>(20240520, 1, {1, 2, 3}, /*count=*/4));  // truncated
  data = TokenDataset::open(path);
  EXPECT_EQ(data.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(data.status().message(), "truncated")) << data.status();
  // Without the magic it is no llm.c file: a FILE.bin is then nanoGPT's headerless uint16 (the
  // would-be header read as tokens), and another name is a prefix whose PREFIX.json is missing.
  write_text(path, llmc_bytes<uint16_t>(12345, 1, {1, 2, 3}));
  data = TokenDataset::open(path);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->header().tokenizer, "gpt2");
  EXPECT_EQ(data->num_tokens(), 256 * 2 + 3);
  const std::string other = path + ".tokens";
  write_text(other, llmc_bytes<uint16_t>(12345, 1, {1, 2, 3}));
  data = TokenDataset::open(other);
  EXPECT_EQ(data.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(data.status().message(), other + ".json")) << data.status();
}

TEST(LlmcFileTest, ATokenOutsideItsVocabularyIsDataLossWhenRead) {
  TempDir dir;
  write_text(dir.path("x.bin"), llmc_bytes<uint16_t>(20240520, 1, {1, 60000, 3}));
  auto data = TokenDataset::open(dir.path("x.bin"));
  ASSERT_TRUE(data.ok()) << data.status();
  absl::Status s = data->check_tokens();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(absl::StrContains(s.message(), "token 1 is 60000")) << s;
}

TEST(LlmcFileTest, WritingGivesLlmcsBytesAndRefusesATokenOfNoId) {
  TempDir dir;
  auto data = TokenDataset::from_tokens({72, 105, 33, 10, 0, 255}, 256);
  ASSERT_TRUE(data.ok()) << data.status();
  ASSERT_TRUE(write_llmc_file(*data, LlmcFormat::kGpt2, dir.path("gpt2.bin")).ok());
  EXPECT_EQ(read_text(dir.path("gpt2.bin")),
            llmc_bytes<uint16_t>(20240520, 1, {72, 105, 33, 10, 0, 255}));
  ASSERT_TRUE(write_llmc_file(*data, LlmcFormat::kLlama3, dir.path("llama.bin")).ok());
  EXPECT_EQ(read_text(dir.path("llama.bin")),
            llmc_bytes<uint32_t>(20240801, 7, {72, 105, 33, 10, 0, 255}));
  auto back = TokenDataset::open(dir.path("llama.bin"));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(read_all(*back), read_all(*data));
  // 60000 is no GPT-2 id: nothing is written.
  auto wide = TokenDataset::from_tokens({1, 60000}, 65536);
  ASSERT_TRUE(wide.ok()) << wide.status();
  absl::Status s = write_llmc_file(*wide, LlmcFormat::kGpt2, dir.path("no.bin"));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "token 1 is 60000")) << s;
  EXPECT_FALSE(std::filesystem::exists(dir.path("no.bin")));
  EXPECT_FALSE(std::filesystem::exists(dir.path("no.bin.tmp")));
}

}  // namespace
}  // namespace troupe::actors
