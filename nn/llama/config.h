// A Llama-family model's configuration (one architecture behind nn::ModelConfig,
// nn/model/config.h), with Hugging Face's LlamaConfig names: what its config.json says, read and
// written with those keys (nn/model/config_json.h).
#pragma once

#include "absl/status/status.h"

namespace troupe::nn {

struct LlamaConfig {
  int vocab_size = 0;               // V
  int hidden_size = 0;              // C
  int intermediate_size = 0;        // the SwiGLU MLP's width
  int num_hidden_layers = 0;        // L
  int num_attention_heads = 0;      // NH; head_dim = C / NH
  int num_key_value_heads = 0;      // KV, grouped-query attention: NH % KV == 0 (0: KV = NH)
  int max_position_embeddings = 0;  // the longest sequence
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  bool tie_word_embeddings = false;
  // troupe's own: rows of the embedding and head (Vp >= V, for a vocabulary that splits over
  // tensor-parallel ranks); 0: Vp = V. Exported models hold V rows.
  int padded_vocab_size = 0;

  int padded_vocab() const { return padded_vocab_size > 0 ? padded_vocab_size : vocab_size; }
  int kv_heads() const {
    return num_key_value_heads > 0 ? num_key_value_heads : num_attention_heads;
  }
  int head_dim() const { return num_attention_heads > 0 ? hidden_size / num_attention_heads : 0; }

  // OK, or InvalidArgument naming the field: sizes positive, C a multiple of NH, NH a multiple
  // of KV, an even head_dim (rotary pairs), Vp >= V, eps and theta positive, every tensor's size
  // within an int.
  [[nodiscard]] absl::Status validate() const;

  friend bool operator==(const LlamaConfig&, const LlamaConfig&) = default;
};

}  // namespace troupe::nn
