// Weights in from and out to Hugging Face (docs/models.md, "Weights in and out"): each
// architecture names and lays out its whole model's tensors as transformers does, and reads its
// config.json. checkpoint/ writes and reads the safetensors files; this says what is in them.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nn/model/config.h"

namespace troupe::nn {

// One tensor under its Hugging Face name: float32, row-major, the product of shape.
struct HfTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> data;
};

// A tensor of a loaded checkpoint: its shape and values (float32, row-major), borrowed.
struct HfTensorView {
  std::vector<int64_t> shape;
  const float* data = nullptr;
};
// The tensor called `name`, or null when there is none.
using HfLookup = std::function<const HfTensorView*(const std::string& name)>;

// The whole model's tensors (`params`: a whole flat buffer of `config`, tensor-parallel size 1)
// as transformers names and lays them out: GPT2LMHeadModel's (Conv1D weights [in, out]) or
// LlamaForCausalLM's; the vocabulary's padding rows dropped; a tied head has no tensor.
std::vector<HfTensor> hf_tensors(const ModelConfig& config, const float* params);

// config.json for `config`, as transformers' save_pretrained writes it (model_type,
// architectures, the architecture's keys, torch_dtype float32): AutoModelForCausalLM loads a
// directory of it and hf_tensors' model.safetensors as it is.
nlohmann::ordered_json hf_config_json(const ModelConfig& config);

// The model a Hugging Face config.json describes (model_type "gpt2" or "llama"). InvalidArgument
// naming the key for a model troupe's architecture is not: another model_type, an activation
// other than GPT-2's gelu_new or Llama's silu, biases in Llama's attention or MLP, rope_scaling,
// a head_dim other than hidden_size / num_attention_heads, a GPT-2 n_inner other than 4 n_embd.
absl::StatusOr<ModelConfig> model_config_from_hf(const nlohmann::json& config_json);

// Fills `params` (a whole flat buffer of `config`, zeroed padding rows included) from the
// tensors `lookup` finds under Hugging Face's names. GPT-2 accepts the hub's names (h.0.attn...)
// and save_pretrained's (transformer.h.0.attn...), Conv1D orientation; a tied Llama ignores an
// lm_head.weight. NotFound naming a missing tensor; InvalidArgument naming one of the wrong shape.
absl::Status hf_load(const ModelConfig& config, const HfLookup& lookup, float* params);

}  // namespace troupe::nn
