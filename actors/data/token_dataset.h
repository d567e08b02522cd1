// A token dataset: PREFIX.bin, the tokens as flat little-endian unsigned
// integers (uint16 when vocab_size <= 65536, else uint32), and PREFIX.json,
// its header (token_dataset_header.h). Samples are llm.c's: non-overlapping
// windows of T tokens, the targets the same window shifted by one.
//
//   auto data = TokenDataset::open("/data/shakespeare");  // opens .bin read-only
//   int64_t n = data->num_samples(T);                     // (num_tokens - 1) / T
//   std::vector<int32_t> inputs(T), targets(T);
//   absl::Status s = data->read_sample(i, T, inputs.data(), targets.data());
//
// A TokenDataset is immutable and cheap to copy (copies share the tokens);
// its methods may be called from any number of threads at once.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "actors/data/llmc_format.h"
#include "actors/data/token_dataset_header.h"

namespace troupe::actors {

class TokenDataset {
 public:
  // Opens PREFIX.bin and checks it against PREFIX.json; or, when `prefix`
  // names a file that starts with one of llm.c's magics, that file as llm.c
  // wrote it (llmc_format.h: the vocabulary is its format's); or, when it
  // names another FILE.bin with no FILE.json beside it, that file as
  // nanoGPT's prepare.py wrote it (nanogpt_format.h: uint16, GPT-2's
  // vocabulary or meta.pkl's). NotFound naming
  // the file that is missing; InvalidArgument naming the file for a bad
  // header (see parse_header, parse_llmc_header) or a .bin whose size is not
  // num_tokens x the dtype's width (truncated, or the header of another
  // file). Token ids are checked when read (read_tokens) or all at once by
  // check_tokens().
  [[nodiscard]] static absl::StatusOr<TokenDataset> open(const std::string& prefix);

  // A dataset held in memory (a synthetic task's). InvalidArgument for
  // vocab_size outside [1, 2^31] or a token outside [0, vocab_size), naming
  // its index.
  [[nodiscard]] static absl::StatusOr<TokenDataset> from_tokens(std::vector<int32_t> tokens,
                                                                int64_t vocab_size,
                                                                std::string tokenizer = "bytes",
                                                                std::string source = "");

  const TokenDatasetHeader& header() const;
  int64_t num_tokens() const { return header().num_tokens; }
  int64_t vocab_size() const { return header().vocab_size; }
  // "PREFIX.bin" for a file, "in-memory tokens" otherwise: what errors name.
  const std::string& name() const;
  // An llm.c file's format (llmc_format.h); nullopt for a troupe dataset.
  std::optional<LlmcFormat> llmc_format() const;

  // Samples of seq_len T: (num_tokens - 1) / T; 0 for an empty dataset or
  // seq_len < 1.
  int64_t num_samples(int seq_len) const;

  // Copies tokens [offset, offset + count) to out[0, count) as int32.
  // OutOfRange if the range is not within [0, num_tokens); DataLoss naming
  // the file, the index and the value for a token >= vocab_size, or naming
  // the file if it was truncated while in use.
  [[nodiscard]] absl::Status read_tokens(int64_t offset, int64_t count, int32_t* out) const;

  // Sample i of length T: inputs = tokens[i*T, i*T + T),
  // targets = tokens[i*T + 1, i*T + T + 1). REQUIRES: inputs and targets hold
  // T int32 each. OutOfRange unless 0 <= i < num_samples(T); DataLoss as
  // read_tokens.
  [[nodiscard]] absl::Status read_sample(int64_t i, int seq_len, int32_t* inputs,
                                         int32_t* targets) const;

  // Reads every token, in order, a chunk of at most 2^16 at a time, and hands
  // each to `fn` with the index of its first token; stops at the first error,
  // read_tokens's or fn's, and returns it.
  [[nodiscard]] absl::Status for_each_chunk(
      const std::function<absl::Status(int64_t offset, std::span<const int32_t> tokens)>& fn) const;
  // Reads every token; DataLoss as read_tokens for the first bad one.
  [[nodiscard]] absl::Status check_tokens() const;

 private:
  struct Storage;  // the file or the vector (token_dataset.cc)
  // `path` as an llm.c file; nullopt when it is not one (not a file, or
  // without llm.c's magic).
  static absl::StatusOr<std::optional<TokenDataset>> open_llmc(const std::string& path);
  // `path` as nanoGPT's headerless FILE.bin (nanogpt_format.h); nullopt when it is not one (not
  // a FILE.bin, or a troupe header FILE.json beside it).
  static absl::StatusOr<std::optional<TokenDataset>> open_nanogpt(const std::string& path);
  explicit TokenDataset(std::shared_ptr<const Storage> storage) : storage_(std::move(storage)) {}
  std::shared_ptr<const Storage> storage_;  // never null
};

}  // namespace troupe::actors
