// A Llama-family model as Hugging Face's LlamaForCausalLM names and lays out its weights: the
// names are troupe's own (nn/llama/layout.h), every matrix [out, in] as nn.Linear's; the
// vocabulary's padding rows are dropped from model.embed_tokens.weight and lm_head.weight.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "nn/llama/layout.h"
#include "nn/model/hf_detail.h"

namespace troupe::nn::hf_detail {
namespace {

// The tensor's shape in a Hugging Face file: the padding rows of the vocabulary dropped.
std::vector<int64_t> hf_shape(const ParamTensor& t, size_t lm_head, const LlamaConfig& config) {
  std::vector<int64_t> shape(t.shape.begin(), t.shape.end());
  if (t.offset == 0 || (lm_head != 0 && t.offset == lm_head)) shape[0] = config.vocab_size;
  return shape;
}

}  // namespace

std::vector<HfTensor> llama_tensors(const LlamaConfig& config, const float* params) {
  const LlamaLayout layout(config);
  std::vector<HfTensor> out;
  for (const ParamTensor& t : layout.model().tensors()) {
    std::vector<int64_t> shape = hf_shape(t, layout.lm_head(), config);
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    out.push_back({t.name, shape, std::vector<float>(params + t.offset, params + t.offset + n)});
  }
  return out;
}

nlohmann::ordered_json llama_config_json(const LlamaConfig& config) {
  return {{"model_type", "llama"},
          {"architectures", {"LlamaForCausalLM"}},
          {"vocab_size", config.vocab_size},
          {"hidden_size", config.hidden_size},
          {"intermediate_size", config.intermediate_size},
          {"num_hidden_layers", config.num_hidden_layers},
          {"num_attention_heads", config.num_attention_heads},
          {"num_key_value_heads", config.kv_heads()},
          {"head_dim", config.head_dim()},
          {"max_position_embeddings", config.max_position_embeddings},
          {"rms_norm_eps", config.rms_norm_eps},
          {"rope_theta", config.rope_theta},
          {"rope_scaling", nullptr},
          {"tie_word_embeddings", config.tie_word_embeddings},
          {"hidden_act", "silu"},
          {"attention_bias", false},
          {"mlp_bias", false},
          {"attention_dropout", 0.0},
          {"initializer_range", 0.02},
          {"torch_dtype", "float32"}};
}

absl::StatusOr<LlamaConfig> llama_config_from_hf(const nlohmann::json& j) {
  LlamaConfig c;
  struct Size {
    const char* key;
    int* out;
  };
  for (const Size& s : {Size{"vocab_size", &c.vocab_size}, Size{"hidden_size", &c.hidden_size},
                        Size{"intermediate_size", &c.intermediate_size},
                        Size{"num_hidden_layers", &c.num_hidden_layers},
                        Size{"num_attention_heads", &c.num_attention_heads},
                        Size{"max_position_embeddings", &c.max_position_embeddings}}) {
    absl::StatusOr<int> v = int_key(j, s.key, 0);
    if (!v.ok()) return v.status();
    if (*v < 1) return unsupported(s.key, "missing");
    *s.out = *v;
  }
  absl::StatusOr<int> kv = int_key(j, "num_key_value_heads", c.num_attention_heads);
  if (!kv.ok()) return kv.status();
  c.num_key_value_heads = *kv;
  absl::StatusOr<double> eps = double_key(j, "rms_norm_eps", 1e-6);
  if (!eps.ok()) return eps.status();
  c.rms_norm_eps = *eps;
  absl::StatusOr<double> theta = double_key(j, "rope_theta", 10000.0);
  if (!theta.ok()) return theta.status();
  c.rope_theta = *theta;
  absl::StatusOr<bool> tied = bool_key(j, "tie_word_embeddings", false);
  if (!tied.ok()) return tied.status();
  c.tie_word_embeddings = *tied;
  absl::StatusOr<std::string> act = string_key(j, "hidden_act", "silu");
  if (!act.ok()) return act.status();
  if (*act != "silu") {
    return unsupported("hidden_act",
                       absl::StrCat("\"", *act, "\"; troupe's Llama MLP is SwiGLU (silu)"));
  }
  for (const char* key : {"attention_bias", "mlp_bias"}) {
    absl::StatusOr<bool> bias = bool_key(j, key, false);
    if (!bias.ok()) return bias.status();
    if (*bias) return unsupported(key, "troupe's Llama has no biases");
  }
  if (auto it = j.find("rope_scaling"); it != j.end() && !it->is_null()) {
    return unsupported("rope_scaling", "scaled rotary embeddings are not implemented");
  }
  absl::StatusOr<int> head_dim = int_key(j, "head_dim", c.head_dim());
  if (!head_dim.ok()) return head_dim.status();
  if (*head_dim != c.head_dim()) {
    return unsupported("head_dim", absl::StrCat(*head_dim,
                                                "; troupe's is hidden_size / "
                                                "num_attention_heads = ",
                                                c.head_dim()));
  }
  if (absl::Status s = c.validate(); !s.ok()) return s;
  return c;
}

absl::Status llama_load(const LlamaConfig& config, const HfLookup& lookup, float* params) {
  const LlamaLayout layout(config);
  for (const ParamTensor& t : layout.model().tensors()) {
    if (absl::Status s = load_tensor(lookup, t.name, hf_shape(t, layout.lm_head(), config), false,
                                     params + t.offset);
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace troupe::nn::hf_detail
