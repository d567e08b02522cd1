#!/usr/bin/env python3
"""Loads a `troupe export` safetensors file into transformers' GPT2LMHeadModel and
compares its logits with troupe's on the same tokens.

    hf_export_reference.py MODEL.safetensors TOKENS.bin LOGITS.bin

TOKENS.bin: int32 B, int32 T, then int32 tokens [B, T]. LOGITS.bin: float32 [B, T, V],
troupe's logits for them (the first V of its padded vocabulary). The model is built
from the GPT2Config in the file's metadata ("config") and loaded with load_state_dict:
every tensor of the file must be one of the model's, and every parameter of the model
must come from the file but lm_head.weight, which is tied to transformer.wte.weight.

Prints one JSON line {"max_abs_diff", "max_abs", "relative"} and exits 0 when
relative = max |hf - troupe| / max |troupe| <= 1e-5 (fp32), 1 otherwise, 2 for a
file the model does not load.

The C++ side (tests/trainers/export_test.cc) writes the inputs and runs this with the
Python of tests/reference/setup_reference_env.sh (PyTorch, transformers, safetensors).
"""

import json
import struct
import sys

import torch
from safetensors import safe_open
from safetensors.torch import load_file
from transformers import GPT2Config, GPT2LMHeadModel


def main():
    path, tokens_path, logits_path = sys.argv[1:4]
    with safe_open(path, "pt") as f:
        metadata = f.metadata()
    config = GPT2Config(**json.loads(metadata["config"]))
    model = GPT2LMHeadModel(config)
    model.eval()
    state = load_file(path)
    missing, unexpected = model.load_state_dict(state, strict=False)
    allowed = lambda k: k == "lm_head.weight" or k.endswith(".attn.bias") or k.endswith(
        ".attn.masked_bias")
    missing = [k for k in missing if not allowed(k)]
    if missing or unexpected:
        print(json.dumps({"missing": missing, "unexpected": unexpected}))
        return 2
    model.tie_weights()
    if not torch.equal(model.lm_head.weight, state["transformer.wte.weight"]):
        print(json.dumps({"error": "lm_head is not tied to wte"}))
        return 2

    with open(tokens_path, "rb") as f:
        data = f.read()
    b, t = struct.unpack("<ii", data[:8])
    tokens = torch.frombuffer(bytearray(data[8:]), dtype=torch.int32).reshape(b, t).long()
    with open(logits_path, "rb") as f:
        expected = torch.frombuffer(bytearray(f.read()), dtype=torch.float32)
    expected = expected.reshape(b, t, config.vocab_size)
    with torch.no_grad():
        logits = model(tokens).logits.float()
    diff = (logits - expected).abs().max().item()
    scale = expected.abs().max().item()
    relative = diff / scale if scale > 0 else diff
    print(json.dumps({"max_abs_diff": diff, "max_abs": scale, "relative": relative}))
    return 0 if relative <= 1e-5 else 1


if __name__ == "__main__":
    sys.exit(main())
