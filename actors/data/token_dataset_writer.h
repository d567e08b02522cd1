// Writes a token dataset (token_dataset.h) in one pass, however large:
// tokens go to temporary files beside PREFIX that are renamed into place by
// finish(), so a reader never sees a half-written PREFIX.bin under a header
// that describes it.
//
//   auto writer = TokenDatasetWriter::create("/data/books", 256, "bytes", "books/*.txt");
//   for (...) RETURN_IF_ERROR((*writer)->append(tokens));
//   absl::Status done = (*writer)->finish();
//
// finish() renames PREFIX.bin before PREFIX.json: a reader that opens an
// existing dataset while it is being replaced may see the new .bin with the
// old header, which open() reports as a size mismatch (try again).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "actors/data/token_dataset_header.h"

namespace troupe::actors {

class TokenDatasetWriter {
 public:
  // Creates PREFIX.bin.tmp.PID (and PREFIX's directory if missing).
  // InvalidArgument for vocab_size outside
  // [1, 2^31]; PermissionDenied / NotFound / Unavailable naming the file
  // when it cannot be created (no such directory, not writable).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<TokenDatasetWriter>> create(
      std::string prefix, int64_t vocab_size, std::string tokenizer, std::string source = "");
  // Removes the temporary files unless finish() succeeded.
  ~TokenDatasetWriter();
  TokenDatasetWriter(const TokenDatasetWriter&) = delete;
  TokenDatasetWriter& operator=(const TokenDatasetWriter&) = delete;

  // Appends tokens. InvalidArgument naming the token's index in the dataset
  // for one outside [0, vocab_size) (nothing of that call is written); an
  // error naming the file if writing fails. REQUIRES: finish() not called.
  [[nodiscard]] absl::Status append(std::span<const int32_t> tokens);
  int64_t num_tokens() const { return header_.num_tokens; }
  // Counts `n` more bytes of text behind the tokens (the header's text_bytes).
  void add_text_bytes(int64_t n) { header_.text_bytes += n; }

  // Flushes, writes the header and renames both files into place. After
  // finish() (whatever it returns) the writer accepts nothing more.
  [[nodiscard]] absl::Status finish();

 private:
  TokenDatasetWriter() = default;
  [[nodiscard]] absl::Status flush();

  std::string prefix_;
  std::string bin_temp_;
  std::string json_temp_;
  TokenDatasetHeader header_;
  int fd_ = -1;
  std::vector<uint8_t> buffer_;  // encoded tokens not yet written
  bool finished_ = false;
  bool committed_ = false;
};

// Writes `tokens` as dataset PREFIX with a TokenDatasetWriter.
[[nodiscard]] absl::Status write_token_dataset(const std::string& prefix,
                                               std::span<const int32_t> tokens, int64_t vocab_size,
                                               const std::string& tokenizer,
                                               const std::string& source = "");

}  // namespace troupe::actors
