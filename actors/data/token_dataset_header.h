// PREFIX.json, the header of a token dataset (token_dataset.h): what the
// tokens in PREFIX.bin are and how many there are.
//
//   {"format": "troupe-tokens", "version": 1, "dtype": "uint16",
//    "vocab_size": 256, "num_tokens": 1048577, "tokenizer": "bytes",
//    "source": "troupe data prepare: shakespeare.txt", "text_bytes": 1048577}
//
// dtype is the width of a token in PREFIX.bin, fixed by vocab_size: "uint16"
// when vocab_size <= 65536, else "uint32". Keys other than these are ignored
// (a later version that changes the meaning of a key bumps "version").
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace troupe::actors {

inline constexpr char kTokenFormat[] = "troupe-tokens";
inline constexpr int kTokenFormatVersion = 1;
// Tokens are int32 in memory, so ids are below 2^31.
inline constexpr int64_t kMaxVocabSize = int64_t{1} << 31;

enum class TokenDtype { kUint16, kUint32 };

// The dtype the format prescribes for a vocabulary of `vocab_size` ids.
TokenDtype dtype_for_vocab(int64_t vocab_size);
const char* dtype_name(TokenDtype dtype);  // "uint16", "uint32"
int dtype_bytes(TokenDtype dtype);         // 2, 4

struct TokenDatasetHeader {
  TokenDtype dtype = TokenDtype::kUint16;
  int64_t vocab_size = 0;
  int64_t num_tokens = 0;
  std::string tokenizer;  // "bytes" (byte_tokenizer.h), or the name of another
  std::string source;     // how the tokens were made, for people; may be empty
  // The bytes of text the tokens encode ("text_bytes"; 0: not known, and the key left out). What
  // bits per byte divides by: bits/byte = loss in nats / ln 2 x num_tokens / text_bytes.
  int64_t text_bytes = 0;
};

// The header as JSON (one line, keys as above, then a newline).
std::string header_to_json(const TokenDatasetHeader& header);

// Parses and checks a header read from `file` (named in errors).
// InvalidArgument naming the file and the key for: text that is not JSON; a
// missing key or one of the wrong type; "format" other than "troupe-tokens";
// "version" other than 1; "dtype" other than the one vocab_size prescribes;
// vocab_size outside [1, 2^31]; num_tokens or text_bytes (optional) outside [0, 2^60].
absl::StatusOr<TokenDatasetHeader> parse_header(absl::string_view json_text,
                                                const std::string& file);

}  // namespace troupe::actors
