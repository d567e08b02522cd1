// The sentencepiece library behind a small interface of standard types. Its header declares
// absl::string_view as std::string_view, which Debian's Abseil defines as a class of its own, so
// the two cannot meet in one translation unit: only sentencepiece_model.cc includes the library.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace troupe::text {

class SentencePieceModel {
 public:
  SentencePieceModel();
  ~SentencePieceModel();

  // Loads a serialized ModelProto (a .model file's bytes). Empty on success, else the library's
  // message.
  std::string load(const std::string& serialized);

  int size() const;    // pieces
  int bos_id() const;  // -1 when the model has none
  int eos_id() const;
  // The ids of `text`, with the model's normaliser and options (no BOS/EOS added).
  void encode(std::string_view text, std::vector<int>* ids) const;
  // The text of `ids`. REQUIRES: every id in [0, size()).
  std::string decode(const std::vector<int>& ids) const;
  std::string piece(int id) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace troupe::text
