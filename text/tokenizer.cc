#include "text/tokenizer.h"

#include "absl/strings/str_cat.h"
#include "text/byte_tokenizer.h"
#include "text/file_text.h"
#include "text/gpt2_tokenizer.h"
#include "text/sentencepiece_tokenizer.h"

namespace troupe::text {
namespace {

// The byte tokenizer behind the Tokenizer interface.
class BytesTokenizer final : public Tokenizer {
 public:
  const std::string& kind() const override { return name_; }
  const std::string& id() const override { return name_; }
  int vocab_size() const override { return ByteTokenizer::kVocabSize; }
  void encode(absl::string_view text, std::vector<int32_t>* out) const override {
    ByteTokenizer::encode_append(text, out);
  }
  using Tokenizer::encode;
  std::string decode(std::span<const int32_t> ids) const override {
    return ByteTokenizer::decode(ids);
  }
  std::optional<int32_t> end_of_text() const override { return std::nullopt; }
  std::optional<int32_t> begin_of_text() const override { return std::nullopt; }
  bool splits_at_lines() const override { return true; }
  std::vector<std::string> files() const override { return {}; }

 private:
  std::string name_ = ByteTokenizer::kName;
};

}  // namespace

void Tokenizer::encode_with_special(absl::string_view text, std::vector<int32_t>* out) const {
  encode(text, out);
}

void Tokenizer::encode_around(absl::string_view text,
                              std::span<const std::pair<std::string, int32_t>> specials,
                              std::vector<int32_t>* out) const {
  size_t at = 0;
  while (at < text.size()) {
    size_t best = absl::string_view::npos, best_length = 0;
    int32_t best_id = -1;
    for (const auto& [s, id] : specials) {
      const size_t p = text.find(s, at);
      if (p < best || (p == best && s.size() > best_length)) {
        best = p;
        best_length = s.size();
        best_id = id;
      }
    }
    if (best != at) {
      encode(text.substr(at, best == absl::string_view::npos ? absl::string_view::npos : best - at),
             out);
    }
    if (best == absl::string_view::npos) break;
    out->push_back(best_id);
    at = best + best_length;
  }
}

std::vector<int32_t> Tokenizer::encode(absl::string_view text) const {
  std::vector<int32_t> ids;
  encode(text, &ids);
  return ids;
}

absl::string_view tokenizer_kind(absl::string_view id_or_spec) {
  return id_or_spec.substr(0, id_or_spec.find_first_of(":-"));
}

absl::StatusOr<std::unique_ptr<Tokenizer>> open_tokenizer(absl::string_view spec) {
  if (spec == ByteTokenizer::kName) return std::make_unique<BytesTokenizer>();
  const size_t colon = spec.find(':');
  const std::string kind(spec.substr(0, colon));
  const std::string path(colon == absl::string_view::npos ? "" : spec.substr(colon + 1));
  if (colon != absl::string_view::npos && kind == "gpt2") {
    if (path.empty()) return absl::InvalidArgumentError("tokenizer gpt2: give its files: gpt2:DIR");
    auto tok = Gpt2Tokenizer::open(path);
    if (!tok.ok()) return tok.status();
    return std::unique_ptr<Tokenizer>(std::move(*tok));
  }
  if (colon != absl::string_view::npos && kind == "sentencepiece") {
    if (path.empty()) {
      return absl::InvalidArgumentError(
          "tokenizer sentencepiece: give its model: sentencepiece:FILE");
    }
    auto tok = SentencePieceTokenizer::open(path);
    if (!tok.ok()) return tok.status();
    return std::unique_ptr<Tokenizer>(std::move(*tok));
  }
  const std::string dir(spec);
  if (colon == absl::string_view::npos && is_directory(dir)) {
    // A tokenizer saved beside a model or dataset (tokenizer_files.h).
    if (file_exists(absl::StrCat(dir, "/tokenizer.model")))
      return open_tokenizer(absl::StrCat("sentencepiece:", dir, "/tokenizer.model"));
    return open_tokenizer(absl::StrCat("gpt2:", dir));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("tokenizer '", spec,
                   "' is not one troupe knows: bytes, gpt2:DIR, sentencepiece:FILE, or a "
                   "directory that holds a tokenizer's files"));
}

}  // namespace troupe::text
