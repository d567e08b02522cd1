// Text generation with a trained model: each new token from the logits at the
// last position, greedily (temperature 0) or sampled from softmax(logits / t).
// Contexts longer than the model's max sequence length keep their last
// max_seq_len tokens. Runs the full forward per new token (no KV cache): meant
// for evaluation and `troupe generate` on small models.
#pragma once

#include <cstdint>
#include <vector>

#include <string>

#include "absl/status/statusor.h"
#include "actors/data/addition_task.h"
#include "core/codec.h"
#include "nn/model/model.h"

namespace troupe::actors {

struct GenerateOptions {
  int max_new_tokens = 16;
  float temperature = 0.0f;  // 0: greedy
  uint64_t seed = 0;         // for sampling
  int stop_token = -1;       // stop a row after it produced this token; -1: never
};

// Continues every prompt (all of the same length >= 1) by up to
// max_new_tokens tokens; returns only the new tokens of each. Rows that hit
// stop_token end there (the stop token included). Deterministic for a seed.
// InvalidArgument for empty or ragged prompts or a token out of the vocabulary.
absl::StatusOr<std::vector<std::vector<int32_t>>> generate_tokens(
    nn::Model& model, const std::vector<std::vector<int32_t>>& prompts,
    const GenerateOptions& options);

// Greedy decoding of held-out problems of a synthetic task.
struct EvalRequest {
  AdditionTaskOptions task;
  int samples = 100;
  TROUPE_FIELDS(task, samples);
};

struct EvalReport {
  int correct = 0;
  int total = 0;
  std::vector<std::string> examples;  // a few "prompt -> generated (expected)" lines
  TROUPE_FIELDS(correct, total, examples);
};

// The task accuracy of `model` (a whole one) on `request.samples` held-out
// problems. Errors: the task's (InvalidArgument) and generate_tokens'.
absl::StatusOr<EvalReport> evaluate_task(nn::Model& model, const EvalRequest& request);

}  // namespace troupe::actors
