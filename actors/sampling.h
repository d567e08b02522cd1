// The next token from a row of logits: greedily, or sampled from softmax(logits / temperature)
// narrowed as Hugging Face's generate narrows it, top-k then top-p (nucleus) after the
// temperature, at least one token kept. Random draws come from a splitmix64 state, so that a
// seed gives the same tokens everywhere (no standard-library distributions).
#pragma once

#include <cstdint>

#include "absl/status/status.h"

namespace troupe::actors {

struct SamplingOptions {
  float temperature = 0.0f;  // 0: greedy (top_k and top_p then change nothing)
  int top_k = 0;             // keep the k most likely tokens; 0: all
  float top_p = 1.0f;  // keep the fewest most likely tokens whose probability reaches p; 1: all
};

// OK, or InvalidArgument naming the field: temperature a finite number >= 0, top_k >= 0, top_p in
// (0, 1].
absl::Status validate(const SamplingOptions& options);

// The next token, in [0, V): with temperature 0 the first largest logit; otherwise a draw from
// the softmax of logits / temperature over the tokens that top-k and top-p keep (the most likely
// first, ties to the smaller id): top-k the k largest, then top-p the shortest run of those,
// most likely first, whose probabilities (renormalised over the k) sum to at least top_p.
// Advances `rng` by one draw when sampling. REQUIRES: V >= 1, validate(options) is OK.
int32_t sample_token(const float* logits, int V, const SamplingOptions& options, uint64_t& rng);

}  // namespace troupe::actors
