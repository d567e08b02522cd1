#!/usr/bin/env python3
"""Saves a small random model with transformers' save_pretrained, and its logits and loss on
random tokens, for troupe to import (tests/checkpoint/pretrained_test.cc).

    hf_import_reference.py ARCH TIED OUT_DIR

ARCH: gpt2 or llama. TIED: 1 or 0 (GPT-2 is always tied). OUT_DIR gets what save_pretrained
writes (config.json, model.safetensors), and:
  tokens.bin   int32 B, int32 T, then int32 inputs [B, T] and int32 targets [B, T]
  logits.bin   float32 [B, T, V]: the model's logits for the inputs
  loss.txt     the mean cross-entropy of those logits against the targets, as text

The models are built from a config offline (random init, fp32, eager attention), the norms and
biases perturbed so that every parameter shapes the output.
"""

import os
import struct
import sys

import torch
import torch.nn.functional as F
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM


def main():
    arch, tied, out = sys.argv[1], sys.argv[2] == "1", sys.argv[3]
    torch.manual_seed(7)
    V, B, T = 61, 2, 9
    if arch == "gpt2":
        config = GPT2Config(vocab_size=V, n_positions=16, n_embd=32, n_layer=2, n_head=4,
                            activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0,
                            attn_pdrop=0.0, layer_norm_epsilon=1e-5)
        model = GPT2LMHeadModel(config)
    else:
        config = LlamaConfig(vocab_size=V, hidden_size=32, intermediate_size=48,
                             num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                             max_position_embeddings=16, rms_norm_eps=1e-5, rope_theta=10000.0,
                             tie_word_embeddings=tied, attn_implementation="eager")
        model = LlamaForCausalLM(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    model.eval()
    os.makedirs(out, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    inputs = torch.randint(0, V, (B, T))
    targets = torch.randint(0, V, (B, T))
    with torch.no_grad():
        logits = model(inputs).logits.float()
    loss = F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))
    with open(os.path.join(out, "tokens.bin"), "wb") as f:
        f.write(struct.pack("<ii", B, T))
        f.write(inputs.to(torch.int32).numpy().tobytes())
        f.write(targets.to(torch.int32).numpy().tobytes())
    with open(os.path.join(out, "logits.bin"), "wb") as f:
        f.write(logits.contiguous().numpy().tobytes())
    with open(os.path.join(out, "loss.txt"), "w") as f:
        f.write(repr(loss.item()) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
