// A byte-level BPE vocabulary (GPT-2's kind) and its merge: ids of byte strings, the rank of each
// merge, and the special tokens.
//
// The merge is tiktoken's: a piece starts as its bytes; the adjacent pair whose joined bytes have
// the lowest merge rank is joined, the leftmost on a tie, until no joined pair has a rank. Each
// part left is then one id.
//
// Built from the files (gpt2_files.h); immutable after that, so encode may run on any number of
// threads at once.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>
#include "absl/strings/string_view.h"

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"

namespace troupe::text {

class BpeVocab {
 public:
  // Adds a token: `bytes` gets `id`. InvalidArgument if the id or the bytes are taken already.
  absl::Status add_token(std::string bytes, int32_t id);
  // Adds a special token (its text never comes out of a merge).
  absl::Status add_special(std::string text, int32_t id);
  // Adds the next merge: first + second, joined, gets the next rank. InvalidArgument unless both
  // halves and the joined bytes are tokens.
  absl::Status add_merge(absl::string_view first, absl::string_view second);
  // Checks the whole: every byte is a token, ids are 0..n-1 without a gap. InvalidArgument naming
  // what is wrong.
  absl::Status finish();

  int vocab_size() const { return static_cast<int>(bytes_of_id_.size()); }
  int num_merges() const { return num_merges_; }
  std::optional<int32_t> special(absl::string_view text) const;
  const std::vector<std::pair<std::string, int32_t>>& specials() const { return specials_; }
  // The bytes of an id (a special token's text). REQUIRES: 0 <= id < vocab_size().
  const std::string& bytes_of(int32_t id) const { return bytes_of_id_[id]; }

  // Appends the ids of `piece` (one pre-tokenised piece; any bytes) to *out.
  void encode_piece(absl::string_view piece, std::vector<int32_t>* out) const;

  // A digest input that is the same however the vocabulary was read: each id's bytes and whether
  // it is special, then each merge, in order.
  std::string canonical() const;

 private:
  static constexpr uint32_t kNoRank = UINT32_MAX;
  uint32_t rank_of(absl::string_view bytes) const;

  absl::flat_hash_map<std::string, int32_t> id_of_;     // ordinary tokens
  absl::flat_hash_map<std::string, uint32_t> rank_of_;  // joined bytes -> merge rank
  std::vector<std::string> bytes_of_id_;
  std::vector<bool> is_special_;
  std::vector<std::pair<std::string, int32_t>> specials_;
  std::vector<std::pair<int32_t, int32_t>> merges_;  // (first id, second id), for canonical()
  int num_merges_ = 0;
  int32_t byte_id_[256];
};

}  // namespace troupe::text
