#include "text/sentencepiece_model.h"

#include <sentencepiece_processor.h>

namespace troupe::text {

struct SentencePieceModel::Impl {
  sentencepiece::SentencePieceProcessor processor;
};

SentencePieceModel::SentencePieceModel() : impl_(std::make_unique<Impl>()) {}
SentencePieceModel::~SentencePieceModel() = default;

std::string SentencePieceModel::load(const std::string& serialized) {
  const auto status = impl_->processor.LoadFromSerializedProto(serialized);
  return status.ok() ? std::string() : status.ToString();
}

int SentencePieceModel::size() const {
  return impl_->processor.GetPieceSize();
}
int SentencePieceModel::bos_id() const {
  return impl_->processor.bos_id();
}
int SentencePieceModel::eos_id() const {
  return impl_->processor.eos_id();
}

void SentencePieceModel::encode(std::string_view text, std::vector<int>* ids) const {
  // Fails only for a processor that holds no model, which a tokenizer never has.
  (void)impl_->processor.Encode(text, ids);
}

std::string SentencePieceModel::decode(const std::vector<int>& ids) const {
  std::string text;
  (void)impl_->processor.Decode(ids, &text);
  return text;
}

std::string SentencePieceModel::piece(int id) const {
  return impl_->processor.IdToPiece(id);
}

}  // namespace troupe::text
