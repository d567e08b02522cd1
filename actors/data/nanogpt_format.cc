#include "actors/data/nanogpt_format.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace troupe::actors {
namespace {

constexpr int64_t kGpt2VocabSize = 50257;

// Little-endian unsigned integer of `n` bytes at p.
int64_t little_endian(absl::string_view p, size_t n) {
  int64_t v = 0;
  for (size_t i = 0; i < n; ++i)
    v |= static_cast<int64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

}  // namespace

std::optional<int64_t> nanogpt_meta_vocab_size(absl::string_view pickle) {
  // The key is pickled as a short string (SHORT_BINUNICODE 0x8c, length 10, or BINUNICODE 'X'
  // with a 4-byte length), possibly memoized (MEMOIZE 0x94, BINPUT 'q' n); then the value:
  // BININT1 'K' (1 byte), BININT2 'M' (2), BININT 'J' (4, signed).
  const absl::string_view key = "vocab_size";
  for (size_t at = pickle.find(key); at != absl::string_view::npos; at = pickle.find(key, at + 1)) {
    size_t p = at + key.size();
    if (p < pickle.size() && static_cast<unsigned char>(pickle[p]) == 0x94) ++p;  // MEMOIZE
    if (p + 1 < pickle.size() && pickle[p] == 'q') p += 2;                        // BINPUT n
    if (p >= pickle.size()) return std::nullopt;
    const char op = pickle[p];
    const absl::string_view rest = pickle.substr(p + 1);
    if (op == 'K' && rest.size() >= 1) return little_endian(rest, 1);
    if (op == 'M' && rest.size() >= 2) return little_endian(rest, 2);
    if (op == 'J' && rest.size() >= 4) {
      return static_cast<int64_t>(static_cast<int32_t>(little_endian(rest, 4)));
    }
  }
  return std::nullopt;
}

absl::StatusOr<TokenDatasetHeader> nanogpt_header(const std::string& path, uint64_t file_bytes) {
  if (file_bytes % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": ", file_bytes,
        " bytes, not a whole number of uint16 tokens (a nanoGPT file, which has no header, was "
        "assumed: no llm.c magic and no troupe header ",
        path.substr(0, path.size() - 4), ".json beside it)"));
  }
  TokenDatasetHeader h;
  h.dtype = TokenDtype::kUint16;
  h.num_tokens = static_cast<int64_t>(file_bytes / 2);
  const std::string meta = (std::filesystem::path(path).parent_path() / "meta.pkl").string();
  std::error_code error;
  if (std::filesystem::is_regular_file(meta, error)) {
    std::ifstream in(meta, std::ios::binary);
    std::stringstream bytes;
    bytes << in.rdbuf();
    const std::optional<int64_t> vocab = nanogpt_meta_vocab_size(bytes.str());
    if (!vocab || *vocab < 1 || *vocab > 65536) {
      return absl::InvalidArgumentError(
          absl::StrCat(meta,
                       ": no vocab_size of 1 to 65536 in it (nanoGPT's meta.pkl holds one "
                       "for a character-level dataset's ",
                       path, ")"));
    }
    h.vocab_size = *vocab;
    h.tokenizer = "nanogpt-char";
    h.source = absl::StrCat("nanoGPT ", path, " with ", meta);
  } else {
    h.vocab_size = kGpt2VocabSize;
    h.tokenizer = "gpt2";
    h.source = absl::StrCat("nanoGPT ", path, " (GPT-2 ids: no meta.pkl beside it)");
  }
  return h;
}

}  // namespace troupe::actors
