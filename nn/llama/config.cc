#include "nn/llama/config.h"

#include <climits>
#include <cstdint>

#include "absl/strings/str_cat.h"

namespace troupe::nn {

absl::Status LlamaConfig::validate() const {
  auto invalid = [](auto... what) {
    return absl::InvalidArgumentError(absl::StrCat("LlamaConfig: ", what...));
  };
  struct Field {
    const char* name;
    int value;
  };
  for (const Field& f : {Field{"vocab_size", vocab_size}, Field{"hidden_size", hidden_size},
                         Field{"intermediate_size", intermediate_size},
                         Field{"num_hidden_layers", num_hidden_layers},
                         Field{"num_attention_heads", num_attention_heads},
                         Field{"max_position_embeddings", max_position_embeddings}}) {
    if (f.value <= 0) return invalid(f.name, " = ", f.value, " must be positive");
  }
  if (num_key_value_heads < 0) {
    return invalid("num_key_value_heads = ", num_key_value_heads, " must be positive");
  }
  if (hidden_size % num_attention_heads != 0) {
    return invalid("hidden_size = ", hidden_size,
                   " is not a multiple of num_attention_heads = ", num_attention_heads);
  }
  if (num_attention_heads % kv_heads() != 0) {
    return invalid("num_attention_heads = ", num_attention_heads,
                   " is not a multiple of num_key_value_heads = ", kv_heads());
  }
  if (head_dim() % 2 != 0) {
    return invalid("head_dim = hidden_size / num_attention_heads = ", head_dim(),
                   " must be even (rotary embeddings turn pairs)");
  }
  if (padded_vocab_size != 0 && padded_vocab_size < vocab_size) {
    return invalid("padded_vocab_size = ", padded_vocab_size, " < vocab_size = ", vocab_size,
                   " (use 0 for no padding)");
  }
  if (!(rms_norm_eps > 0) || !(rope_theta > 0)) {
    return invalid("rms_norm_eps = ", rms_norm_eps, " and rope_theta = ", rope_theta,
                   " must be positive");
  }
  const int64_t C = hidden_size;
  if (C * intermediate_size > INT_MAX || int64_t{padded_vocab()} * C > INT_MAX || C * C > INT_MAX) {
    return invalid("hidden_size = ", hidden_size, " with intermediate_size ", intermediate_size,
                   " and vocabulary ", padded_vocab(), " make a tensor over INT_MAX elements");
  }
  return absl::OkStatus();
}

}  // namespace troupe::nn
