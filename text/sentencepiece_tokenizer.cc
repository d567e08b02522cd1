#include "text/sentencepiece_tokenizer.h"

#include "absl/strings/str_cat.h"
#include "text/digest.h"
#include "text/file_text.h"

namespace troupe::text {

SentencePieceTokenizer::SentencePieceTokenizer() : model_(std::make_unique<SentencePieceModel>()) {}

SentencePieceTokenizer::~SentencePieceTokenizer() = default;

absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> SentencePieceTokenizer::open(
    const std::string& file) {
  auto bytes = read_file_text(file, size_t{1} << 31);
  if (!bytes.ok()) {
    if (absl::IsNotFound(bytes.status())) {
      return absl::NotFoundError(
          absl::StrCat("SentencePiece model ", file,
                       ": no such file (scripts/fetch_text.sh fetches a Llama-family one)"));
    }
    return bytes.status();
  }
  std::unique_ptr<SentencePieceTokenizer> tok(new SentencePieceTokenizer());
  if (std::string error = tok->model_->load(*bytes); !error.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": not a SentencePiece model: ", error));
  }
  tok->file_ = file;
  tok->vocab_size_ = tok->model_->size();
  if (tok->vocab_size_ <= 0)
    return absl::InvalidArgumentError(absl::StrCat(file, ": a SentencePiece model of no pieces"));
  if (int bos = tok->model_->bos_id(); bos >= 0) tok->bos_ = bos;
  if (int eos = tok->model_->eos_id(); eos >= 0) tok->eos_ = eos;
  tok->id_ = absl::StrCat("sentencepiece-", sha256_hex(*bytes).substr(0, 10));
  return tok;
}

void SentencePieceTokenizer::encode(absl::string_view text, std::vector<int32_t>* out) const {
  std::vector<int> ids;
  model_->encode(std::string_view(text.data(), text.size()), &ids);
  out->insert(out->end(), ids.begin(), ids.end());
}

void SentencePieceTokenizer::encode_with_special(absl::string_view text,
                                                 std::vector<int32_t>* out) const {
  std::vector<std::pair<std::string, int32_t>> specials;
  for (std::optional<int32_t> id : {bos_, eos_}) {
    if (id) specials.emplace_back(piece(*id), *id);
  }
  encode_around(text, specials, out);
}

std::string SentencePieceTokenizer::decode(std::span<const int32_t> ids) const {
  std::string text;
  std::vector<int> run;
  auto flush = [&] {
    if (run.empty()) return;
    text += model_->decode(run);
    run.clear();
  };
  for (int32_t id : ids) {
    if (id >= 0 && id < vocab_size_) {
      run.push_back(id);
    } else {
      flush();
      absl::StrAppend(&text, "<|", id, "|>");
    }
  }
  flush();
  return text;
}

std::string SentencePieceTokenizer::piece(int32_t id) const {
  return model_->piece(id);
}

}  // namespace troupe::text
