#include "text/gpt2_pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <cstdio>
#include <cstdlib>

namespace troupe::text {
namespace {

// Unicode's White_Space property, code point by code point (see the header).
#define TROUPE_WS                                                                             \
  "\\x{9}-\\x{D}\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}" \
  "\\x{205F}\\x{3000}"

constexpr char kPattern[] =
    "'(?:[sdmt]|ll|ve|re)"
    "| ?\\p{L}++"
    "| ?\\p{N}++"
    "| ?[^" TROUPE_WS
    "\\p{L}\\p{N}]++"
    "|[" TROUPE_WS "]+(?![^" TROUPE_WS
    "])"
    "|[" TROUPE_WS "]+";

#undef TROUPE_WS

}  // namespace

Gpt2Pretokenizer::Gpt2Pretokenizer() {
  int error = 0;
  PCRE2_SIZE offset = 0;
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kPattern), PCRE2_ZERO_TERMINATED,
                        PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error, &offset, nullptr);
  if (code_ == nullptr) {
    // The pattern is fixed: only a PCRE2 built without Unicode support, or no memory, gets here.
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    std::fprintf(stderr, "troupe: GPT-2 pre-tokenizer pattern does not compile: %s\n",
                 reinterpret_cast<const char*>(message));
    std::abort();
  }
  jit_ = pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE) == 0;
}

Gpt2Pretokenizer::~Gpt2Pretokenizer() {
  pcre2_code_free(code_);
}

void* Gpt2Pretokenizer::new_match_data() const {
  return pcre2_match_data_create_from_pattern(code_, nullptr);
}

void Gpt2Pretokenizer::free_match_data(void* match_data) {
  pcre2_match_data_free(static_cast<pcre2_match_data*>(match_data));
}

bool Gpt2Pretokenizer::next_match(absl::string_view text, size_t from, size_t* start, size_t* end,
                                  void* match_data) const {
  auto* md = static_cast<pcre2_match_data*>(match_data);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  const int rc = jit_ ? pcre2_jit_match(code_, subject, text.size(), from, 0, md, nullptr)
                      : pcre2_match(code_, subject, text.size(), from, 0, md, nullptr);
  if (rc < 0) return false;  // no match (or a resource limit: the rest is one unmatched piece)
  const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(md);
  *start = ovector[0];
  *end = ovector[1];
  // Every alternative takes at least one character; a zero-length match cannot occur, but if it
  // did the scan must still move on.
  if (*end <= *start) return false;
  return true;
}

void Gpt2Pretokenizer::split(
    absl::string_view text,
    const std::function<void(absl::string_view piece, bool matched)>& on_piece) const {
  for_each_piece(text, on_piece);
}

}  // namespace troupe::text
