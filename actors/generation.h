// Text generation with a trained model: each new token from the logits at the last position,
// greedily (temperature 0) or sampled (actors/sampling.h: temperature, then top-k and top-p).
// With the KV cache (GenerateOptions::use_kv_cache, nn/model/decoder.h) the prompt runs once
// (prefill) and each new token costs one position; without it, or for a model without a
// decoder, every token runs the full forward over the whole context. Contexts longer than the
// model's max sequence length keep their last max_seq_len tokens: once the context outgrows it,
// each further token runs the full forward over that window (the cache's positions would shift),
// so cached and uncached decoding give the same tokens throughout.
#pragma once

#include <cstdint>
#include <vector>

#include <string>

#include "absl/status/statusor.h"
#include "actors/data/addition_task.h"
#include "actors/sampling.h"
#include "core/codec.h"
#include "nn/model/model.h"

namespace troupe::actors {

struct GenerateOptions {
  int max_new_tokens = 16;
  float temperature = 0.0f;  // 0: greedy
  int top_k = 0;             // sample from the k most likely tokens; 0: off
  float top_p = 1.0f;        // sample from the most likely tokens holding p of the mass; 1: off
  uint64_t seed = 0;         // for sampling
  int stop_token = -1;       // stop a row after it produced this token; -1: never
  bool use_kv_cache = true;  // decode incrementally where the model has a decoder
};

// Continues every prompt (all of the same length >= 1) by up to max_new_tokens tokens; returns
// only the new tokens of each. Rows that hit stop_token end there (the stop token included);
// generation ends when every row has. Deterministic for a seed (and a thread count: the logits
// are); greedy tokens are the same with and without the cache up to float rounding of the logits
// (nn/model/decoder.h). InvalidArgument for empty or ragged prompts, a token out of the
// vocabulary or sampling options that sampling.h's validate refuses; the model's errors.
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
