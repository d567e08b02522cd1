#include "checkpoint/hf_gpt2.h"

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"

namespace troupe::checkpoint {
namespace {

// A [rows, cols] row-major matrix, transposed.
std::vector<float> transposed(const float* m, int64_t rows, int64_t cols) {
  std::vector<float> t(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c)
      t[static_cast<size_t>(c * rows + r)] = m[r * cols + c];
  }
  return t;
}

std::vector<float> copied(const float* p, int64_t n) {
  return std::vector<float>(p, p + n);
}

}  // namespace

std::vector<SafeTensor> hf_gpt2_tensors(const nn::GPTConfig& model, const float* params) {
  const nn::GPTParamLayout layout(model);
  const int64_t C = model.channels;
  const int64_t V = model.vocab_size;
  const int64_t T = model.max_seq_len;
  std::vector<SafeTensor> out;
  out.push_back({"transformer.wte.weight", {V, C}, copied(params + layout.wte(), V * C)});
  out.push_back({"transformer.wpe.weight", {T, C}, copied(params + layout.wpe(), T * C)});
  using nn::BlockTensor;
  for (int l = 0; l < model.num_layers; ++l) {
    const std::string h = absl::StrCat("transformer.h.", l, ".");
    auto at = [&](BlockTensor t) { return params + layout.block_tensor(l, t); };
    out.push_back({h + "ln_1.weight", {C}, copied(at(BlockTensor::kLn1w), C)});
    out.push_back({h + "ln_1.bias", {C}, copied(at(BlockTensor::kLn1b), C)});
    out.push_back(
        {h + "attn.c_attn.weight", {C, 3 * C}, transposed(at(BlockTensor::kQkvw), 3 * C, C)});
    out.push_back({h + "attn.c_attn.bias", {3 * C}, copied(at(BlockTensor::kQkvb), 3 * C)});
    out.push_back({h + "attn.c_proj.weight", {C, C}, transposed(at(BlockTensor::kAttprojw), C, C)});
    out.push_back({h + "attn.c_proj.bias", {C}, copied(at(BlockTensor::kAttprojb), C)});
    out.push_back({h + "ln_2.weight", {C}, copied(at(BlockTensor::kLn2w), C)});
    out.push_back({h + "ln_2.bias", {C}, copied(at(BlockTensor::kLn2b), C)});
    out.push_back({h + "mlp.c_fc.weight", {C, 4 * C}, transposed(at(BlockTensor::kFcw), 4 * C, C)});
    out.push_back({h + "mlp.c_fc.bias", {4 * C}, copied(at(BlockTensor::kFcb), 4 * C)});
    out.push_back(
        {h + "mlp.c_proj.weight", {4 * C, C}, transposed(at(BlockTensor::kFcprojw), C, 4 * C)});
    out.push_back({h + "mlp.c_proj.bias", {C}, copied(at(BlockTensor::kFcprojb), C)});
  }
  out.push_back({"transformer.ln_f.weight", {C}, copied(params + layout.lnfw(), C)});
  out.push_back({"transformer.ln_f.bias", {C}, copied(params + layout.lnfb(), C)});
  return out;
}

std::string hf_gpt2_config_json(const nn::GPTConfig& model) {
  nlohmann::json j = {{"model_type", "gpt2"},        {"architectures", {"GPT2LMHeadModel"}},
                      {"n_layer", model.num_layers}, {"n_head", model.num_heads},
                      {"n_embd", model.channels},    {"n_positions", model.max_seq_len},
                      {"n_ctx", model.max_seq_len},  {"vocab_size", model.vocab_size},
                      {"n_inner", nullptr},          {"activation_function", "gelu_new"},
                      {"layer_norm_epsilon", 1e-5},  {"resid_pdrop", 0.0},
                      {"embd_pdrop", 0.0},           {"attn_pdrop", 0.0},
                      {"tie_word_embeddings", true}, {"bos_token_id", nullptr},
                      {"eos_token_id", nullptr},     {"scale_attn_weights", true}};
  return j.dump();
}

}  // namespace troupe::checkpoint
