// GPT-2 as Hugging Face's GPT2LMHeadModel names and lays out its weights:
// "transformer.wte.weight" [V, C] (the padding rows dropped), "transformer.wpe.weight" [maxT, C],
// per block l "transformer.h.l.{ln_1,attn.c_attn,attn.c_proj,ln_2,mlp.c_fc,mlp.c_proj}.{weight,
// bias}" with the linear layers' weights in GPT-2's Conv1D orientation [in, out] (troupe's are
// [out, in], as nn.Linear's), and "transformer.ln_f.{weight,bias}". The LM head is tied to wte.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "nn/gpt2/layout.h"
#include "nn/model/hf_detail.h"

namespace troupe::nn::hf_detail {
namespace {

std::vector<float> copied(const float* p, int64_t n) {
  return std::vector<float>(p, p + n);
}

// A block tensor's GPT-2 name after "h.<l>.", whether it is a Conv1D weight, and its shape in
// troupe's orientation.
struct BlockName {
  BlockTensor tensor;
  const char* name;
  bool conv1d;
};

constexpr BlockName kBlockNames[] = {
    {BlockTensor::kLn1w, "ln_1.weight", false},
    {BlockTensor::kLn1b, "ln_1.bias", false},
    {BlockTensor::kQkvw, "attn.c_attn.weight", true},
    {BlockTensor::kQkvb, "attn.c_attn.bias", false},
    {BlockTensor::kAttprojw, "attn.c_proj.weight", true},
    {BlockTensor::kAttprojb, "attn.c_proj.bias", false},
    {BlockTensor::kLn2w, "ln_2.weight", false},
    {BlockTensor::kLn2b, "ln_2.bias", false},
    {BlockTensor::kFcw, "mlp.c_fc.weight", true},
    {BlockTensor::kFcb, "mlp.c_fc.bias", false},
    {BlockTensor::kFcprojw, "mlp.c_proj.weight", true},
    {BlockTensor::kFcprojb, "mlp.c_proj.bias", false},
};

std::vector<int64_t> shape_of(const GPTParamLayout& layout, size_t offset) {
  for (const ParamTensor& t : layout.tensors()) {
    if (t.offset == offset) return std::vector<int64_t>(t.shape.begin(), t.shape.end());
  }
  return {};
}

}  // namespace

std::vector<HfTensor> gpt2_tensors(const GPTConfig& config, const float* params) {
  const GPTParamLayout layout(config);
  const int64_t C = config.channels, V = config.vocab_size, T = config.max_seq_len;
  std::vector<HfTensor> out;
  out.push_back({"transformer.wte.weight", {V, C}, copied(params + layout.wte(), V * C)});
  out.push_back({"transformer.wpe.weight", {T, C}, copied(params + layout.wpe(), T * C)});
  for (int l = 0; l < config.num_layers; ++l) {
    for (const BlockName& b : kBlockNames) {
      const size_t offset = layout.block_tensor(l, b.tensor);
      std::vector<int64_t> shape = shape_of(layout, offset);
      int64_t n = 1;
      for (int64_t d : shape)
        n *= d;
      HfTensor t{absl::StrCat("transformer.h.", l, ".", b.name), shape, {}};
      if (b.conv1d) {
        t.data = transposed(params + offset, shape[0], shape[1]);
        std::swap(t.shape[0], t.shape[1]);
      } else {
        t.data = copied(params + offset, n);
      }
      out.push_back(std::move(t));
    }
  }
  out.push_back({"transformer.ln_f.weight", {C}, copied(params + layout.lnfw(), C)});
  out.push_back({"transformer.ln_f.bias", {C}, copied(params + layout.lnfb(), C)});
  return out;
}

nlohmann::ordered_json gpt2_config_json(const GPTConfig& config) {
  return {{"model_type", "gpt2"},
          {"architectures", {"GPT2LMHeadModel"}},
          {"n_layer", config.num_layers},
          {"n_head", config.num_heads},
          {"n_embd", config.channels},
          {"n_positions", config.max_seq_len},
          {"n_ctx", config.max_seq_len},
          {"vocab_size", config.vocab_size},
          {"n_inner", nullptr},
          {"activation_function", "gelu_new"},
          {"layer_norm_epsilon", 1e-5},
          {"resid_pdrop", 0.0},
          {"embd_pdrop", 0.0},
          {"attn_pdrop", 0.0},
          {"tie_word_embeddings", true},
          {"bos_token_id", nullptr},
          {"eos_token_id", nullptr},
          {"scale_attn_weights", true},
          {"torch_dtype", "float32"}};
}

absl::StatusOr<GPTConfig> gpt2_config_from_hf(const nlohmann::json& j) {
  GPTConfig c;
  struct Size {
    const char* key;
    int* out;
  };
  for (const Size& s :
       {Size{"n_layer", &c.num_layers}, Size{"n_head", &c.num_heads}, Size{"n_embd", &c.channels},
        Size{"n_positions", &c.max_seq_len}, Size{"vocab_size", &c.vocab_size}}) {
    absl::StatusOr<int> v = int_key(j, s.key, 0);
    if (!v.ok()) return v.status();
    if (*v < 1) return unsupported(s.key, "missing");
    *s.out = *v;
  }
  absl::StatusOr<int> inner = int_key(j, "n_inner", 4 * c.channels);
  if (!inner.ok()) return inner.status();
  if (*inner != 4 * c.channels) {
    return unsupported("n_inner",
                       absl::StrCat(*inner, "; troupe's GPT-2 MLP is 4 n_embd = ", 4 * c.channels));
  }
  absl::StatusOr<std::string> act = string_key(j, "activation_function", "gelu_new");
  if (!act.ok()) return act.status();
  if (*act != "gelu_new" && *act != "gelu_pytorch_tanh") {
    return unsupported(
        "activation_function",
        absl::StrCat("\"", *act, "\"; troupe's GPT-2 uses the tanh GELU (gelu_new)"));
  }
  absl::StatusOr<double> eps = double_key(j, "layer_norm_epsilon", 1e-5);
  if (!eps.ok()) return eps.status();
  if (*eps != 1e-5) return unsupported("layer_norm_epsilon", "troupe's GPT-2 LayerNorm uses 1e-5");
  absl::StatusOr<bool> tied = bool_key(j, "tie_word_embeddings", true);
  if (!tied.ok()) return tied.status();
  if (!*tied) return unsupported("tie_word_embeddings", "troupe's GPT-2 ties its head to wte");
  if (absl::Status s = c.validate(); !s.ok()) return s;
  return c;
}

absl::Status gpt2_load(const GPTConfig& config, const HfLookup& lookup, float* params) {
  const GPTParamLayout layout(config);
  // save_pretrained's names start with "transformer."; the hub's original files' do not.
  const std::string prefix = lookup("transformer.wte.weight") != nullptr ? "transformer." : "";
  const int64_t C = config.channels, V = config.vocab_size, T = config.max_seq_len;
  if (absl::Status s = load_tensor(lookup, prefix + "wte.weight", {V, C}, false, params); !s.ok()) {
    return s;
  }
  if (absl::Status s =
          load_tensor(lookup, prefix + "wpe.weight", {T, C}, false, params + layout.wpe());
      !s.ok()) {
    return s;
  }
  for (int l = 0; l < config.num_layers; ++l) {
    for (const BlockName& b : kBlockNames) {
      const size_t offset = layout.block_tensor(l, b.tensor);
      if (absl::Status s = load_tensor(lookup, absl::StrCat(prefix, "h.", l, ".", b.name),
                                       shape_of(layout, offset), b.conv1d, params + offset);
          !s.ok()) {
        return s;
      }
    }
  }
  if (absl::Status s =
          load_tensor(lookup, prefix + "ln_f.weight", {C}, false, params + layout.lnfw());
      !s.ok()) {
    return s;
  }
  return load_tensor(lookup, prefix + "ln_f.bias", {C}, false, params + layout.lnfb());
}

}  // namespace troupe::nn::hf_detail
