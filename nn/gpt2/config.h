// GPT-2's configuration (one architecture behind nn::ModelConfig, nn/model/config.h). Its JSON
// keys are GPT-2's own: n_layer, n_head, n_embd, seq_len (n_positions), vocab_size and troupe's
// padded_vocab_size (nn/model/config_json.h).
#pragma once

#include "absl/status/status.h"

namespace troupe::nn {

struct GPTConfig {
  int max_seq_len = 0;        // maxT
  int vocab_size = 0;         // V
  int padded_vocab_size = 0;  // Vp (e.g. V rounded up to a multiple of 128); 0: Vp = V
  int num_layers = 0;         // L
  int num_heads = 0;          // NH
  int channels = 0;           // C

  int padded_vocab() const { return padded_vocab_size > 0 ? padded_vocab_size : vocab_size; }

  // OK, or InvalidArgument naming the field: every size must be positive, C a multiple of NH,
  // Vp >= V, and every tensor's size must fit in an int.
  [[nodiscard]] absl::Status validate() const;

  friend bool operator==(const GPTConfig&, const GPTConfig&) = default;
};

}  // namespace troupe::nn
