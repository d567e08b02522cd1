#include "actors/training_types.h"

namespace troupe::actors {

nn::GPTConfig ModelSpec::gpt() const {
  nn::GPTConfig c;
  c.max_seq_len = seq_len;
  c.vocab_size = vocab_size;
  c.padded_vocab_size = padded_vocab_size;
  c.num_layers = n_layer;
  c.num_heads = n_head;
  c.channels = n_embd;
  return c;
}

nn::AdamWConfig OptimizerSpec::adamw(float lr) const {
  return {.lr = lr, .beta1 = beta1, .beta2 = beta2, .eps = eps, .weight_decay = weight_decay};
}

nn::SgdConfig OptimizerSpec::sgd(float lr) const {
  return {.lr = lr,
          .momentum = momentum,
          .dampening = dampening,
          .weight_decay = weight_decay,
          .nesterov = nesterov};
}

}  // namespace troupe::actors
