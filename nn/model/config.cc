#include "nn/model/config.h"

#include "absl/strings/str_cat.h"

namespace troupe::nn {

const char* architecture_name(Architecture a) {
  switch (a) {
    case Architecture::kGpt2:
      return "gpt2";
    case Architecture::kLlama:
      return "llama";
  }
  return "unknown";
}

int ModelConfig::vocab_size() const {
  return gpt2() != nullptr ? gpt2()->vocab_size : llama()->vocab_size;
}

int ModelConfig::padded_vocab() const {
  return gpt2() != nullptr ? gpt2()->padded_vocab() : llama()->padded_vocab();
}

int ModelConfig::num_layers() const {
  return gpt2() != nullptr ? gpt2()->num_layers : llama()->num_hidden_layers;
}

int ModelConfig::hidden_size() const {
  return gpt2() != nullptr ? gpt2()->channels : llama()->hidden_size;
}

int ModelConfig::num_heads() const {
  return gpt2() != nullptr ? gpt2()->num_heads : llama()->num_attention_heads;
}

int ModelConfig::max_seq_len() const {
  return gpt2() != nullptr ? gpt2()->max_seq_len : llama()->max_position_embeddings;
}

void ModelConfig::set_padded_vocab(int padded_vocab_size) {
  if (GPTConfig* g = gpt2()) {
    g->padded_vocab_size = padded_vocab_size;
  } else {
    llama()->padded_vocab_size = padded_vocab_size;
  }
}

ModelConfig ModelConfig::normalized() const {
  ModelConfig out = *this;
  out.set_padded_vocab(padded_vocab());
  if (LlamaConfig* l = out.llama()) l->num_key_value_heads = l->kv_heads();
  return out;
}

absl::Status ModelConfig::validate() const {
  return gpt2() != nullptr ? gpt2()->validate() : llama()->validate();
}

std::string ModelConfig::describe() const {
  if (const GPTConfig* g = gpt2()) {
    return absl::StrCat("gpt2 n_layer ", g->num_layers, ", n_head ", g->num_heads, ", n_embd ",
                        g->channels, ", seq_len ", g->max_seq_len, ", vocab ", g->vocab_size, "/",
                        g->padded_vocab());
  }
  const LlamaConfig& l = *llama();
  return absl::StrCat("llama num_hidden_layers ", l.num_hidden_layers, ", hidden_size ",
                      l.hidden_size, ", intermediate_size ", l.intermediate_size,
                      ", num_attention_heads ", l.num_attention_heads, ", num_key_value_heads ",
                      l.kv_heads(), ", max_position_embeddings ", l.max_position_embeddings,
                      ", vocab ", l.vocab_size, "/", l.padded_vocab(),
                      l.tie_word_embeddings ? ", tied" : ", untied");
}

}  // namespace troupe::nn
