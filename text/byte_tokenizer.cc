#include "text/byte_tokenizer.h"

#include "absl/strings/str_cat.h"

namespace troupe::text {

std::vector<int32_t> ByteTokenizer::encode(absl::string_view text) {
  std::vector<int32_t> tokens;
  encode_append(text, &tokens);
  return tokens;
}

void ByteTokenizer::encode_append(absl::string_view text, std::vector<int32_t>* out) {
  out->reserve(out->size() + text.size());
  for (char c : text)
    out->push_back(static_cast<unsigned char>(c));
}

std::string ByteTokenizer::decode(std::span<const int32_t> tokens) {
  std::string text;
  text.reserve(tokens.size());
  for (int32_t t : tokens) {
    if (t >= 0 && t < kVocabSize) {
      text.push_back(static_cast<char>(static_cast<unsigned char>(t)));
    } else {
      absl::StrAppend(&text, "<|", t, "|>");
    }
  }
  return text;
}

}  // namespace troupe::text
