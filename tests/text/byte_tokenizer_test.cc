// The byte-level tokenizer: a token per byte, decoded back exactly.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "text/byte_tokenizer.h"

namespace troupe::text {
namespace {

TEST(ByteTokenizerTest, EncodesBytesAsUnsignedValues) {
  EXPECT_EQ(ByteTokenizer::encode("hi\n"), (std::vector<int32_t>{104, 105, 10}));
  EXPECT_EQ(ByteTokenizer::encode(std::string("\x00\xff\x80", 3)),
            (std::vector<int32_t>{0, 255, 128}));
  EXPECT_TRUE(ByteTokenizer::encode("").empty());
  std::vector<int32_t> tokens = {1};
  ByteTokenizer::encode_append("ab", &tokens);
  EXPECT_EQ(tokens, (std::vector<int32_t>{1, 97, 98}));
}

TEST(ByteTokenizerTest, EveryByteRoundTrips) {
  std::string all;
  for (int b = 0; b < 256; ++b)
    all.push_back(static_cast<char>(b));
  const std::string utf8 = "caf\xc3\xa9 \xe2\x9c\x93";  // "café ✓"
  for (const std::string& text : {all, utf8, std::string("07+35=240\n")}) {
    std::vector<int32_t> tokens = ByteTokenizer::encode(text);
    EXPECT_EQ(tokens.size(), text.size());
    EXPECT_EQ(ByteTokenizer::decode(tokens), text);
  }
}

TEST(ByteTokenizerTest, TokensOutsideTheVocabAreShownNotDropped) {
  EXPECT_EQ(ByteTokenizer::decode(std::vector<int32_t>{72, 300, 105, -1}), "H<|300|>i<|-1|>");
  EXPECT_EQ(ByteTokenizer::kVocabSize, 256);
  EXPECT_STREQ(ByteTokenizer::kName, "bytes");
}

}  // namespace
}  // namespace troupe::text
