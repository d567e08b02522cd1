// The training config's `model` section: the architecture's keys through the model config's one
// codec (nn/model/config_json.h), under the bounds a training run holds them to.
#include <initializer_list>
#include <string>

#include "absl/strings/str_cat.h"
#include "nn/model/config_json.h"
#include "nn/model/layout.h"
#include "trainers/config.h"
#include "trainers/config_reader.h"
#include "trainers/config_sections.h"

namespace troupe::trainers::config_detail {

absl::Status parse_model(JsonObject& top, TrainConfig* config) {
  absl::StatusOr<std::optional<JsonObject>> section = top.section("model");
  if (!section.ok()) return section.status();
  bool padded_given = true;  // the default model's is
  if (section->has_value()) {
    JsonObject& s = **section;
    const Json& given = *top.find("model");
    const auto padded = given.find("padded_vocab_size");
    padded_given = padded != given.end() && !padded->is_null() &&
                   !(padded->is_number() && padded->get<double>() == 0);
    TROUPE_CONFIG_RETURN_IF_ERROR(
        s.read("recompute_activations", &config->model_options.recompute_activations));
    // The training config's bounds on the model's sizes, read by the architecture's keys before
    // the codec, so that a message names the key and its bound; then any key that is not the
    // architecture's (model_config_to_json of an empty config names them all), with a
    // suggestion. What the codec refuses besides is its message.
    const Json* type = s.find("type");
    const bool llama = type != nullptr && type->is_string() && type->get<std::string>() == "llama";
    struct KeyBound {
      const char* key;
      int min;
      int max;
    };
    const std::initializer_list<KeyBound> gpt2_bounds = {
        {"n_layer", 1, kMaxLayers},   {"n_head", 1, kMaxHeads},
        {"n_embd", 1, kMaxChannels},  {"seq_len", 2, kMaxSeqLen},
        {"vocab_size", 1, kMaxVocab}, {"padded_vocab_size", 0, kMaxVocab}};
    const std::initializer_list<KeyBound> llama_bounds = {
        {"num_hidden_layers", 1, kMaxLayers},       {"num_attention_heads", 1, kMaxHeads},
        {"num_key_value_heads", 0, kMaxHeads},      {"hidden_size", 1, kMaxChannels},
        {"max_position_embeddings", 2, kMaxSeqLen}, {"vocab_size", 1, kMaxVocab},
        {"padded_vocab_size", 0, kMaxVocab}};
    for (const KeyBound& b : llama ? llama_bounds : gpt2_bounds) {
      int value = 0;
      TROUPE_CONFIG_RETURN_IF_ERROR(s.read(b.key, &value, b.min, b.max));
    }
    const nn::ModelConfig empty =
        llama ? nn::ModelConfig(nn::LlamaConfig{}) : nn::ModelConfig(nn::GPTConfig{});
    const nlohmann::ordered_json keys = nn::model_config_to_json(empty);
    for (auto it = keys.begin(); it != keys.end(); ++it)
      s.find(it.key());
    TROUPE_CONFIG_RETURN_IF_ERROR(s.check_unknown(llama ? " for model type llama" : ""));
    // The model's own keys go through its one codec, over the default model (a padded
    // vocabulary left out is resolved below).
    nn::ModelConfig base = config->model;
    base.set_padded_vocab(0);
    absl::StatusOr<nn::ModelConfig> model =
        nn::model_config_from_json(*top.find("model"), "model", base, {"recompute_activations"});
    if (!model.ok()) return config_error(std::string(model.status().message()));
    config->model = *std::move(model);
  }
  nn::ModelConfig& m = config->model;
  struct Bound {
    const char* what;
    int value;
    int max;
  };
  for (const Bound& b :
       {Bound{"layers", m.num_layers(), kMaxLayers}, Bound{"heads", m.num_heads(), kMaxHeads},
        Bound{"hidden size", m.hidden_size(), kMaxChannels},
        Bound{"sequence length", m.max_seq_len(), kMaxSeqLen},
        Bound{"padded vocabulary", m.padded_vocab(), kMaxVocab}}) {
    if (b.value > b.max) {
      return config_error(absl::StrCat("model: ", b.value, " ", b.what,
                                       " is out of range; must be at most ", b.max));
    }
  }
  if (m.max_seq_len() < 2) {
    return config_error(
        absl::StrCat("model: sequence length ", m.max_seq_len(),
                     " is out of range; must be at least 2 (an input and a target)"));
  }
  // Absent or 0, it is vocab_size rounded up to a multiple of 64.
  if (!padded_given) m.set_padded_vocab(default_padded_vocab(m.vocab_size()));
  if (absl::Status s = m.validate(); !s.ok()) {
    return config_error(absl::StrCat("model: ", s.message()));
  }
  return absl::OkStatus();
}

}  // namespace troupe::trainers::config_detail
