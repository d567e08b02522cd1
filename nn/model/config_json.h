// The one JSON codec of nn::ModelConfig: the training config's `model` section, the model file,
// the checkpoint manifest, the export's troupe.json and the actors' messages all use it.
//
//   {"type": "gpt2", "n_layer": 4, "n_head": 4, "n_embd": 64, "seq_len": 64,
//    "vocab_size": 256, "padded_vocab_size": 256}
//   {"type": "llama", "vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008,
//    "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
//    "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
//    "tie_word_embeddings": false, "padded_vocab_size": 32000}
//
// An object without "type" is GPT-2's (configs written before there was a choice). The Llama
// keys are Hugging Face's LlamaConfig's; padded_vocab_size is troupe's own for both.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "nn/model/config.h"

namespace troupe::nn {

// Every key of the config, "type" first.
nlohmann::ordered_json model_config_to_json(const ModelConfig& config);

// Reads `j` over `base`: a key given replaces the base's value, a key absent keeps it (a base of
// another architecture than `type` names counts as empty). Unknown keys, values of the wrong
// type or out of range, and a config its architecture's validate() refuses are InvalidArgument
// naming the key under `where` ("model.n_embd: ..."). `ignored` keys are skipped (the training
// config's model options, which are not the model's).
absl::StatusOr<ModelConfig> model_config_from_json(const nlohmann::ordered_json& j,
                                                   const std::string& where = "model",
                                                   const ModelConfig& base = {},
                                                   std::initializer_list<const char*> ignored = {});
absl::StatusOr<ModelConfig> model_config_from_json(const nlohmann::json& j,
                                                   const std::string& where = "model");

// Text forms, for messages between processes (the codec above on dump()/parse()).
std::string model_config_to_text(const ModelConfig& config);
absl::StatusOr<ModelConfig> model_config_from_text(const std::string& text);

}  // namespace troupe::nn
