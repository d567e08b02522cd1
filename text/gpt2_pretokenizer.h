// GPT-2's pre-tokenisation: the regular expression that cuts text into the pieces BPE then
// merges within (OpenAI's encoder.py and tiktoken's r50k_base/gpt2):
//
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//
// compiled by PCRE2 (Unicode letter and number classes, the lookahead), JIT-compiled where the
// platform has a JIT. \s is spelt out as Unicode's White_Space code points, which is what
// tiktoken's regex engine means by it (PCRE2's \s leaves out U+0085).
//
//   Gpt2Pretokenizer pre;  // once; REQUIRES nothing can fail but memory (the pattern is fixed)
//   pre.split("Hello  world's", [](absl::string_view piece, bool matched) { ... });
//   // "Hello", " ", " world", "'s"
//
// Bytes that are not valid UTF-8 match nothing; each run of them is handed over as one piece
// with matched = false, so every byte of the text is in exactly one piece, in order.
// Thread-safe: split may run on many threads at once.
#pragma once

#include <functional>
#include "absl/strings/string_view.h"

struct pcre2_real_code_8;

namespace troupe::text {

class Gpt2Pretokenizer {
 public:
  Gpt2Pretokenizer();
  ~Gpt2Pretokenizer();
  Gpt2Pretokenizer(const Gpt2Pretokenizer&) = delete;
  Gpt2Pretokenizer& operator=(const Gpt2Pretokenizer&) = delete;

  // Calls on_piece for each piece of `text`, in order.
  void split(absl::string_view text,
             const std::function<void(absl::string_view piece, bool matched)>& on_piece) const;

  // Calls on_piece as split does, with a template callable (no std::function per piece).
  template <typename F>
  void for_each_piece(absl::string_view text, F&& on_piece) const;

 private:
  // The end of the next match at or after `from`, its start in *start; false when none.
  bool next_match(absl::string_view text, size_t from, size_t* start, size_t* end,
                  void* match_data) const;
  void* new_match_data() const;
  static void free_match_data(void* match_data);

  pcre2_real_code_8* code_ = nullptr;
  bool jit_ = false;
};

template <typename F>
void Gpt2Pretokenizer::for_each_piece(absl::string_view text, F&& on_piece) const {
  void* match_data = new_match_data();
  size_t at = 0;
  while (at < text.size()) {
    size_t start = 0, end = 0;
    if (!next_match(text, at, &start, &end, match_data)) {
      on_piece(text.substr(at), false);
      break;
    }
    if (start > at) on_piece(text.substr(at, start - at), false);
    on_piece(text.substr(start, end - start), true);
    at = end;
  }
  free_match_data(match_data);
}

}  // namespace troupe::text
