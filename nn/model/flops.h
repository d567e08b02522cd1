// What training a model costs in floating-point operations, as the papers and the trainers people
// compare with count it (PaLM's appendix B, torchtitan's get_num_flop_per_token, llm.c's
// estimate_mfu): per token, 6 N for the matrix products forward and backward, plus 12 L H Q T
// for attention's scores and their use over a context of T.
//
//   double f = training_flops_per_token(config, T);    // 6 * 3.2e6 + 12 * 4 * 128 * 64
//   double mfu = tokens_per_s * f / peak_flops;
#pragma once

#include "nn/model/config.h"

namespace troupe::nn {

// The parameters that multiply activations: every weight but the embeddings' lookups (token and
// position); a head tied to the token embedding counts it once, since its product is real work.
size_t matmul_params(const ModelConfig& config);

// Training FLOPs per token at sequence length T: 6 x matmul_params + 12 x L x C x T (C = H x Q,
// the query heads' width). REQUIRES: config.validate() is OK, T >= 1.
double training_flops_per_token(const ModelConfig& config, int seq_len);

}  // namespace troupe::nn
