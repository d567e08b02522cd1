#include "trainers/config.h"

namespace troupe::trainers {

nn::GPTConfig ModelConfig::gpt() const {
  nn::GPTConfig c;
  c.max_seq_len = seq_len;
  c.vocab_size = vocab_size;
  c.padded_vocab_size = padded_vocab_size > 0 ? padded_vocab_size : (vocab_size + 63) / 64 * 64;
  c.num_layers = n_layer;
  c.num_heads = n_head;
  c.channels = n_embd;
  return c;
}

}  // namespace troupe::trainers
