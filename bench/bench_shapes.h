// The GPT shapes the training benchmarks share: ddp_bench's medium config (12.3M parameters)
// and CI's smoke size.
#pragma once

#include "nn/model/model.h"

namespace troupe::bench {

struct Shape {
  int L, C, NH, T, V, B;  // layers, channels, heads, sequence, vocabulary, micro-batch
};
// A GPT of 6 layers x 384, 6 heads, seq 256, vocab 4096; micro-batch 4 per rank.
inline constexpr Shape kMedium = {6, 384, 6, 256, 4096, 4};
inline constexpr Shape kTiny = {2, 64, 4, 32, 256, 2};

// The model of `s` (its vocabulary unpadded).
inline nn::ModelConfig gpt_config(const Shape& s) {
  return nn::GPTConfig{.max_seq_len = s.T,
                       .vocab_size = s.V,
                       .padded_vocab_size = s.V,
                       .num_layers = s.L,
                       .num_heads = s.NH,
                       .channels = s.C};
}

}  // namespace troupe::bench
