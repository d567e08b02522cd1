// Tokenizers: text to token ids and back, whatever the vocabulary. Three kinds:
//
//   "bytes"          a token per byte, vocab 256 (byte_tokenizer.h)
//   "gpt2"           GPT-2's byte-level BPE (gpt2_tokenizer.h), from encoder.json + vocab.bpe,
//                    vocab.json + merges.txt, or a tokenizer.json
//   "sentencepiece"  a SentencePiece model (sentencepiece_tokenizer.h): Llama, Mistral
//
// A tokenizer is named by a spec, which is how users and configs write it, and identified by
// its id, which is what datasets, model files and checkpoints record:
//
//   auto tok = open_tokenizer("gpt2:data/tokenizers/gpt2");   // or "bytes", "sentencepiece:FILE"
//   std::vector<int32_t> ids;
//   (*tok)->encode("Hello world", &ids);                      // {15496, 995}
//   std::string text = (*tok)->decode(ids);                   // "Hello world"
//   (*tok)->id();                                             // "gpt2-8f7b4b3c0d"
//
// Every method is const and safe to call from any number of threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"

namespace troupe::text {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // "bytes", "gpt2" or "sentencepiece".
  virtual const std::string& kind() const = 0;
  // What identifies the vocabulary: the kind, then (for a tokenizer read from files) a hyphen and
  // the first 10 hex digits of the SHA-256 of its files' contents (tokenizer_files.h). Two
  // tokenizers with the same id give the same ids for every text.
  virtual const std::string& id() const = 0;
  // The number of ids, special tokens included: every id encode gives is in [0, vocab_size()).
  virtual int vocab_size() const = 0;

  // Appends the ids of `text` to `*out`. Special tokens written in the text ("<|endoftext|>") are
  // encoded as the plain text they are, as tiktoken's encode_ordinary does: text from a file
  // cannot inject them. Any bytes encode (invalid UTF-8 included), as the vocabulary allows.
  virtual void encode(absl::string_view text, std::vector<int32_t>* out) const = 0;
  // As encode, but a special token's text becomes its id (tiktoken's allowed_special="all").
  virtual void encode_with_special(absl::string_view text, std::vector<int32_t>* out) const;
  std::vector<int32_t> encode(absl::string_view text) const;

  // The text of `ids`, bytes as they were encoded. An id outside [0, vocab_size()) shows as
  // "<|N|>", N in decimal, so that it is visible rather than dropped; so does a special token
  // that has no text of its own (SentencePiece's <s>, </s> show as themselves).
  virtual std::string decode(std::span<const int32_t> ids) const = 0;

  // The token that ends a document: GPT-2's <|endoftext|> (50256), SentencePiece's EOS (</s>).
  // nullopt for the byte tokenizer, which has none.
  virtual std::optional<int32_t> end_of_text() const = 0;
  // The token a document starts with (SentencePiece's BOS <s>); nullopt when there is none.
  virtual std::optional<int32_t> begin_of_text() const = 0;

  // Whether encoding can be split at a line start (a byte after '\n' that is not whitespace)
  // without changing the ids: true for bytes and GPT-2 (its pre-tokenisation never joins across
  // such a point), false for SentencePiece (each piece would gain a leading space).
  virtual bool splits_at_lines() const = 0;

  // The files that define the vocabulary, as paths (empty for the byte tokenizer), for
  // save_tokenizer (tokenizer_files.h) to copy beside a model.
  virtual std::vector<std::string> files() const = 0;

 protected:
  // encode_with_special's way for any tokenizer: each occurrence of a special token's text (the
  // earliest first, the longest where two start at once) becomes its id, and the text between
  // them is encode()d.
  void encode_around(absl::string_view text,
                     std::span<const std::pair<std::string, int32_t>> specials,
                     std::vector<int32_t>* out) const;
};

// Opens a tokenizer by spec: "bytes", "gpt2:DIR" (DIR holding encoder.json + vocab.bpe,
// vocab.json + merges.txt, or tokenizer.json), "gpt2:FILE" (a tokenizer.json),
// "sentencepiece:FILE" (a .model), or a bare DIR that holds one of these (a model's tokenizer/).
// NotFound naming a missing file; InvalidArgument for an unknown kind or a file that is not what
// its kind reads, naming the file and what is wrong.
[[nodiscard]] absl::StatusOr<std::unique_ptr<Tokenizer>> open_tokenizer(absl::string_view spec);

// The kind part of an id or spec: "gpt2" of "gpt2-8f7b4b3c0d" or "gpt2:DIR".
absl::string_view tokenizer_kind(absl::string_view id_or_spec);

}  // namespace troupe::text
