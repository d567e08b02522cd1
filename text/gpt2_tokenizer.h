// GPT-2's byte-level BPE tokenizer (tokenizer.h), read from OpenAI's files or Hugging Face's:
//
//   DIR/encoder.json + DIR/vocab.bpe    as GPT-2 was released (and tiktoken's data_gym form)
//   DIR/vocab.json + DIR/merges.txt     the same two files under Hugging Face's names
//   tokenizer.json                      a Hugging Face fast tokenizer of model type BPE with the
//                                       ByteLevel pre-tokenizer
//
// Tokens are written in GPT-2's byte-to-character map (a printable character per byte, "Ġ" for
// a space). Ids from encode are tiktoken's for the same files (tests/text/gpt2_tokenizer_test.cc
// checks the whole Shakespeare corpus); <|endoftext|> is the end-of-text token.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "text/bpe_vocab.h"
#include "text/gpt2_pretokenizer.h"
#include "text/tokenizer.h"

namespace troupe::text {

class Gpt2Tokenizer final : public Tokenizer {
 public:
  // Reads the files at `path`: a directory holding one of the pairs above, or a tokenizer.json.
  // NotFound naming the files looked for; InvalidArgument naming the file and the entry that is
  // not GPT-2's format (a merge of tokens not in the vocabulary, a byte without a token, ...).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<Gpt2Tokenizer>> open(const std::string& path);

  const std::string& kind() const override { return kind_; }
  const std::string& id() const override { return id_; }
  int vocab_size() const override { return vocab_.vocab_size(); }
  int num_merges() const { return vocab_.num_merges(); }
  void encode(absl::string_view text, std::vector<int32_t>* out) const override;
  void encode_with_special(absl::string_view text, std::vector<int32_t>* out) const override;
  using Tokenizer::encode;
  std::string decode(std::span<const int32_t> ids) const override;
  std::optional<int32_t> end_of_text() const override { return end_of_text_; }
  std::optional<int32_t> begin_of_text() const override { return std::nullopt; }
  bool splits_at_lines() const override { return true; }
  std::vector<std::string> files() const override { return files_; }

 private:
  Gpt2Tokenizer() = default;
  absl::Status finish();

  std::string kind_ = "gpt2";
  std::string id_;
  BpeVocab vocab_;
  Gpt2Pretokenizer pretokenizer_;
  std::optional<int32_t> end_of_text_;
  std::vector<std::string> files_;
};

// GPT-2's byte-to-character map: the character (a code point, written as UTF-8) that stands for
// byte b in encoder.json and vocab.bpe, and back. unmap_bytes gives nullopt for a string with a
// character that stands for no byte.
std::string map_bytes(absl::string_view bytes);
std::optional<std::string> unmap_bytes(absl::string_view mapped);

}  // namespace troupe::text
