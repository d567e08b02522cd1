// The byte-level tokenizer: a token is one byte of the text, 0..255, so any
// file (UTF-8 or not) encodes, and decoding gives the bytes back exactly.
// Its name in a dataset header is "bytes".
//
//   std::vector<int32_t> tokens = ByteTokenizer::encode("12+34=");
//   std::string text = ByteTokenizer::decode(tokens);  // "12+34="
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace troupe::text {

class ByteTokenizer {
 public:
  static constexpr int kVocabSize = 256;
  static constexpr char kName[] = "bytes";

  // One token per byte of `text`, its value as an unsigned char.
  static std::vector<int32_t> encode(absl::string_view text);
  // Appends the tokens of `text` to `*out`.
  static void encode_append(absl::string_view text, std::vector<int32_t>* out);

  // The bytes back. A token outside [0, 256) (a model with a vocabulary
  // padded past 256 may emit one) is shown as "<|N|>", N in decimal, so that
  // it is visible instead of silently dropped: decode({72, 300}) == "H<|300|>".
  static std::string decode(std::span<const int32_t> tokens);
};

}  // namespace troupe::text
