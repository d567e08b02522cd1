// Encoding large texts on several threads, with the ids a single encode gives.
//
//   std::vector<int32_t> ids = encode_parallel(tok, whole_file, /*threads=*/8);
//
// A tokenizer whose encoding can be cut at line starts (Tokenizer::splits_at_lines) has the text
// cut into chunks there, encoded at once, and joined in order; any other encodes it on one thread
// (SentencePiece adds a leading space to each piece of text it is given, so a cut would show).
// Many documents encode in parallel whatever the tokenizer (encode_documents).
#pragma once

#include <cstdint>
#include <span>
#include <vector>
#include "absl/strings/string_view.h"

#include "text/tokenizer.h"

namespace troupe::text {

// REQUIRES: threads >= 1. The same ids as tokenizer.encode(text) (encode_with_special when
// `special`).
std::vector<int32_t> encode_parallel(const Tokenizer& tokenizer, absl::string_view text,
                                     int threads, bool special = false);

// Each document's ids, documents spread over `threads` threads (each as encode would give it;
// long ones cut as encode_parallel does). REQUIRES: threads >= 1.
std::vector<std::vector<int32_t>> encode_documents(const Tokenizer& tokenizer,
                                                   std::span<const absl::string_view> documents,
                                                   int threads, bool special = false);

// Where `text` may be cut for a line-splitting tokenizer: offsets p in (0, size) with text[p - 1]
// == '\n' and text[p] a printable ASCII character other than a space, chosen near multiples of
// `chunk_bytes`. Ascending; may be empty.
std::vector<size_t> line_cuts(absl::string_view text, size_t chunk_bytes);

}  // namespace troupe::text
