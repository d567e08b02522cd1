// The one model configuration type: an architecture and its own config (docs/models.md). The
// training config, the model file, the checkpoint manifest, export and the actors' messages
// carry a ModelConfig, written and read by one JSON codec (config_json.h):
//   "model": {"type": "gpt2", "n_layer": 12, ...}   or   {"type": "llama", "hidden_size": ...}
// Code outside nn/ asks it only what every architecture has (the accessors below) and hands it
// to the architecture's code through the seam (model.h).
#pragma once

#include <string>
#include <variant>

#include "absl/status/status.h"
#include "nn/gpt2/config.h"
#include "nn/llama/config.h"

namespace troupe::nn {

enum class Architecture : int {
  kGpt2,
  kLlama,
};

// "gpt2", "llama": the JSON `type`.
const char* architecture_name(Architecture a);

class ModelConfig {
 public:
  constexpr ModelConfig() = default;  // an empty GPT-2 config (not valid)
  constexpr ModelConfig(const GPTConfig& gpt2) : config_(gpt2) {}      // NOLINT: implicit
  constexpr ModelConfig(const LlamaConfig& llama) : config_(llama) {}  // NOLINT: implicit

  Architecture architecture() const {
    return config_.index() == 0 ? Architecture::kGpt2 : Architecture::kLlama;
  }
  // The architecture's config; null for another architecture.
  const GPTConfig* gpt2() const { return std::get_if<GPTConfig>(&config_); }
  const LlamaConfig* llama() const { return std::get_if<LlamaConfig>(&config_); }
  GPTConfig* gpt2() { return std::get_if<GPTConfig>(&config_); }
  LlamaConfig* llama() { return std::get_if<LlamaConfig>(&config_); }

  // What every architecture has.
  int vocab_size() const;    // V: token ids are in [0, V)
  int padded_vocab() const;  // Vp >= V: rows of the token embedding and the head
  int num_layers() const;    // L: blocks
  int hidden_size() const;   // C: the residual stream's width
  int num_heads() const;     // attention heads (query heads)
  int max_seq_len() const;   // the longest sequence T
  // Sets the padded vocabulary (0: none).
  void set_padded_vocab(int padded_vocab_size);

  // OK, or InvalidArgument naming the field (the architecture's validate()).
  [[nodiscard]] absl::Status validate() const;
  // One line for messages: "gpt2 n_layer 4, n_head 4, n_embd 64, seq_len 30, vocab 256/256".
  std::string describe() const;

  // The same config with its implied values written out (padded_vocab_size = padded_vocab(),
  // num_key_value_heads = kv_heads()): what the codec writes.
  ModelConfig normalized() const;
  // The same model: equal once normalized.
  friend bool operator==(const ModelConfig& a, const ModelConfig& b) {
    return a.normalized().config_ == b.normalized().config_;
  }

 private:
  std::variant<GPTConfig, LlamaConfig> config_;
};

}  // namespace troupe::nn
