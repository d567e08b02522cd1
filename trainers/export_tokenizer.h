// The tokenizer of an exported model, as Hugging Face's AutoTokenizer reads it beside the
// weights: GPT-2's vocab.json + merges.txt (or its tokenizer.json) with a tokenizer_config.json
// naming GPT2Tokenizer; a SentencePiece model as tokenizer.model with LlamaTokenizer. A byte-level
// model has no tokenizer files.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace troupe::trainers {

// Writes them into `out_dir`, from the tokenizer saved in `tokenizer_dir` (a checkpoint
// directory's tokenizer/), checked against `id` first; each file written atomically after
// `check(path)` allows it. Returns the names written. NotFound / FailedPrecondition as
// text::open_saved_tokenizer; I/O errors as they are.
absl::StatusOr<std::vector<std::string>> export_tokenizer(
    const std::string& tokenizer_dir, const std::string& id, int model_max_length,
    const std::string& out_dir, const std::function<absl::Status(const std::string&)>& check);

}  // namespace troupe::trainers
