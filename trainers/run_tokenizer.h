// The tokenizer a run trains with: its id, from the dataset's header ("bytes" for a synthetic
// task), and the files `troupe data prepare` saved beside the dataset (PREFIX.tokenizer/). The
// run records the id in its model file and checkpoint manifests and copies the files next to
// them (DIR/tokenizer/), so that `troupe generate` and `troupe export` find the vocabulary the
// model was trained on without being told.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "trainers/config.h"

namespace troupe::trainers {

struct RunTokenizer {
  std::string id = "bytes";
  std::string files_dir;  // PREFIX.tokenizer when it exists; empty otherwise
};

// The run's tokenizer. Errors: opening the dataset's header.
absl::StatusOr<RunTokenizer> run_tokenizer(const TrainConfig& config);

// Copies the tokenizer's files into `dir`/tokenizer, checked against the id first. Nothing for a
// tokenizer without files (bytes; an llm.c file's). FailedPrecondition naming both ids when the
// files beside the dataset are another vocabulary than its header says; I/O errors as they are.
absl::Status save_run_tokenizer(const RunTokenizer& tokenizer, const std::string& dir);

}  // namespace troupe::trainers
