#include "text/bpe_vocab.h"

#include <algorithm>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace troupe::text {
namespace {

std::string shown(absl::string_view bytes) {
  return absl::StrCat("\"", absl::CHexEscape(bytes), "\"");
}

}  // namespace

absl::Status BpeVocab::add_token(std::string bytes, int32_t id) {
  if (id < 0) return absl::InvalidArgumentError(absl::StrCat("token ", shown(bytes), ": id ", id));
  if (static_cast<size_t>(id) < bytes_of_id_.size() && !bytes_of_id_[id].empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "id ", id, " is given twice: ", shown(bytes_of_id_[id]), " and ", shown(bytes)));
  }
  if (bytes.empty()) return absl::InvalidArgumentError(absl::StrCat("id ", id, " has no bytes"));
  auto [it, inserted] = id_of_.emplace(bytes, id);
  if (!inserted) {
    return absl::InvalidArgumentError(
        absl::StrCat(shown(bytes), " has two ids: ", it->second, " and ", id));
  }
  if (static_cast<size_t>(id) >= bytes_of_id_.size()) {
    bytes_of_id_.resize(id + 1);
    is_special_.resize(id + 1, false);
  }
  bytes_of_id_[id] = std::move(bytes);
  return absl::OkStatus();
}

absl::Status BpeVocab::add_special(std::string text, int32_t id) {
  if (id < 0) return absl::InvalidArgumentError(absl::StrCat("special ", shown(text), ": id ", id));
  if (static_cast<size_t>(id) < bytes_of_id_.size() && !bytes_of_id_[id].empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "id ", id, " is given twice: ", shown(bytes_of_id_[id]), " and ", shown(text)));
  }
  if (static_cast<size_t>(id) >= bytes_of_id_.size()) {
    bytes_of_id_.resize(id + 1);
    is_special_.resize(id + 1, false);
  }
  bytes_of_id_[id] = text;
  is_special_[id] = true;
  specials_.emplace_back(std::move(text), id);
  return absl::OkStatus();
}

absl::Status BpeVocab::add_merge(absl::string_view first, absl::string_view second) {
  auto a = id_of_.find(first);
  auto b = id_of_.find(second);
  if (a == id_of_.end() || b == id_of_.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "merge ", num_merges_ + 1, " (", shown(first), " + ", shown(second),
        "): ", shown(a == id_of_.end() ? first : second), " is not in the vocabulary"));
  }
  std::string joined = absl::StrCat(first, second);
  if (!id_of_.contains(joined)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "merge ", num_merges_ + 1, " makes ", shown(joined), ", which is not in the vocabulary"));
  }
  // A later merge that makes the same bytes again never wins over the first.
  rank_of_.emplace(std::move(joined), static_cast<uint32_t>(num_merges_));
  merges_.emplace_back(a->second, b->second);
  ++num_merges_;
  return absl::OkStatus();
}

absl::Status BpeVocab::finish() {
  for (int b = 0; b < 256; ++b) {
    auto it = id_of_.find(std::string(1, static_cast<char>(b)));
    if (it == id_of_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("byte ", b, " has no token: a byte-level vocabulary has all 256"));
    }
    byte_id_[b] = it->second;
  }
  for (size_t id = 0; id < bytes_of_id_.size(); ++id) {
    if (bytes_of_id_[id].empty())
      return absl::InvalidArgumentError(absl::StrCat("id ", id, " has no token"));
  }
  return absl::OkStatus();
}

std::optional<int32_t> BpeVocab::special(absl::string_view text) const {
  for (const auto& [s, id] : specials_) {
    if (s == text) return id;
  }
  return std::nullopt;
}

uint32_t BpeVocab::rank_of(absl::string_view bytes) const {
  auto it = rank_of_.find(bytes);
  return it == rank_of_.end() ? kNoRank : it->second;
}

void BpeVocab::encode_piece(absl::string_view piece, std::vector<int32_t>* out) const {
  if (piece.empty()) return;
  if (piece.size() == 1) {
    out->push_back(byte_id_[static_cast<unsigned char>(piece[0])]);
    return;
  }
  if (auto it = id_of_.find(piece); it != id_of_.end()) {
    out->push_back(it->second);
    return;
  }
  // parts[i] = (start of part i, rank of joining part i with part i + 1); two sentinels at the end.
  struct Part {
    size_t start;
    uint32_t rank;
  };
  const size_t n = piece.size();
  std::vector<Part> parts;
  parts.reserve(n + 1);
  for (size_t i = 0; i + 1 < n; ++i)
    parts.push_back({i, rank_of(piece.substr(i, 2))});
  parts.push_back({n - 1, kNoRank});
  parts.push_back({n, kNoRank});
  auto joined_rank = [&](size_t i) {
    return i + 3 < parts.size()
               ? rank_of(piece.substr(parts[i].start, parts[i + 3].start - parts[i].start))
               : kNoRank;
  };
  for (;;) {
    size_t best = 0;
    uint32_t best_rank = kNoRank;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      if (parts[i].rank < best_rank) {
        best_rank = parts[i].rank;
        best = i;
      }
    }
    if (best_rank == kNoRank) break;
    if (best > 0) parts[best - 1].rank = joined_rank(best - 1);
    parts[best].rank = joined_rank(best);
    parts.erase(parts.begin() + static_cast<std::ptrdiff_t>(best) + 1);
  }
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    absl::string_view bytes = piece.substr(parts[i].start, parts[i + 1].start - parts[i].start);
    // Every part is a byte or the bytes of a merge, both tokens (add_merge, finish).
    out->push_back(bytes.size() == 1 ? byte_id_[static_cast<unsigned char>(bytes[0])]
                                     : id_of_.find(bytes)->second);
  }
}

std::string BpeVocab::canonical() const {
  std::string out;
  for (size_t id = 0; id < bytes_of_id_.size(); ++id) {
    absl::StrAppend(&out, is_special_[id] ? "S" : "T", bytes_of_id_[id].size(), ":",
                    bytes_of_id_[id]);
  }
  for (const auto& [a, b] : merges_)
    absl::StrAppend(&out, "M", a, ",", b, ";");
  return out;
}

}  // namespace troupe::text
