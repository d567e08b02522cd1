// A tokenizer's files saved beside what it made, so that a model or a dataset carries its own
// vocabulary (as a Hugging Face model directory does):
//
//   save_tokenizer(tok, "runs/x/tokenizer");      // encoder.json + vocab.bpe, or tokenizer.model
//   auto same = open_saved_tokenizer("runs/x/tokenizer", tok.id());
//
// A byte tokenizer has no files: saving it writes nothing, and the id "bytes" opens it.
#pragma once

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "text/tokenizer.h"

namespace troupe::text {

// Copies the tokenizer's files into `dir` (created if missing), each written atomically: a
// SentencePiece model as tokenizer.model, GPT-2's files under their own names. Internal with
// errno's text on an I/O failure.
[[nodiscard]] absl::Status save_tokenizer(const Tokenizer& tokenizer, const std::string& dir);

// The tokenizer whose id is `id`: "bytes", or the one saved in `dir`. NotFound naming `dir` when
// it holds none; FailedPrecondition naming both ids when the files there are another vocabulary
// than `id` says (altered, or replaced).
[[nodiscard]] absl::StatusOr<std::unique_ptr<Tokenizer>> open_saved_tokenizer(
    const std::string& dir, const std::string& id);

}  // namespace troupe::text
