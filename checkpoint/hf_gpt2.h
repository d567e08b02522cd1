// troupe's GPT as Hugging Face's GPT2LMHeadModel names and lays out its
// weights: "transformer.wte.weight" [V, C] (the padding rows dropped),
// "transformer.wpe.weight" [maxT, C], per block l
// "transformer.h.l.{ln_1,attn.c_attn,attn.c_proj,ln_2,mlp.c_fc,mlp.c_proj}.{weight,bias}"
// with the linear layers' weights in GPT-2's Conv1D orientation [in, out]
// (troupe's are [out, in], as nn.Linear's), and "transformer.ln_f.{weight,bias}".
// The LM head is tied to wte and has no tensor of its own.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "checkpoint/safetensors.h"
#include "nn/gpt2/layout.h"

namespace troupe::checkpoint {

// The tensors of `params` (the whole flat buffer, nn/gpt_param_layout.h).
std::vector<SafeTensor> hf_gpt2_tensors(const nn::GPTConfig& model, const float* params);

// GPT2Config's keys for `model` as JSON: {"model_type": "gpt2", "n_layer",
// "n_head", "n_embd", "n_positions", "n_ctx", "vocab_size",
// "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5, ...}.
std::string hf_gpt2_config_json(const nn::GPTConfig& model);

}  // namespace troupe::checkpoint
