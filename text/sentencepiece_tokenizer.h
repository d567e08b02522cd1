// A SentencePiece model (tokenizer.h) through the sentencepiece library: Llama's and Mistral's
// tokenizer.model (BPE with byte fallback), or any other .model file.
//
// Encoding is the library's Encode with the model's own normaliser and options (no BOS or EOS
// added: a dataset writer adds them where documents start and end). Ids are the `sentencepiece`
// Python package's for the same file (tests/text/sentencepiece_tokenizer_test.cc).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "text/sentencepiece_model.h"
#include "text/tokenizer.h"

namespace troupe::text {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  // Loads a .model file. NotFound naming it when missing; InvalidArgument naming it with the
  // library's message when it is not a SentencePiece model.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> open(
      const std::string& file);
  ~SentencePieceTokenizer() override;

  const std::string& kind() const override { return kind_; }
  const std::string& id() const override { return id_; }
  int vocab_size() const override { return vocab_size_; }
  void encode(absl::string_view text, std::vector<int32_t>* out) const override;
  void encode_with_special(absl::string_view text, std::vector<int32_t>* out) const override;
  using Tokenizer::encode;
  std::string decode(std::span<const int32_t> ids) const override;
  std::optional<int32_t> end_of_text() const override { return eos_; }
  std::optional<int32_t> begin_of_text() const override { return bos_; }
  bool splits_at_lines() const override { return false; }
  std::vector<std::string> files() const override { return {file_}; }

  // The piece of an id ("▁the", "<0x0A>", "<s>"). REQUIRES: 0 <= id < vocab_size().
  std::string piece(int32_t id) const;

 private:
  SentencePieceTokenizer();

  std::string kind_ = "sentencepiece";
  std::string id_;
  std::string file_;
  int vocab_size_ = 0;
  std::optional<int32_t> bos_, eos_;
  std::unique_ptr<SentencePieceModel> model_;
};

}  // namespace troupe::text
