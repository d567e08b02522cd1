#!/usr/bin/env python3
"""Loads a `troupe export` model directory with transformers' AutoModelForCausalLM, as it
is, and compares its logits with troupe's on the same tokens.

    hf_export_reference.py MODEL_DIR TOKENS.bin LOGITS.bin

MODEL_DIR: config.json and model.safetensors, as `troupe export --output MODEL_DIR` writes
them. TOKENS.bin: int32 B, int32 T, then int32 tokens [B, T]. LOGITS.bin: float32 [B, T, V],
troupe's logits for them (the first V of its padded vocabulary). The model is
AutoModelForCausalLM.from_pretrained(MODEL_DIR): every tensor of the file must be one of
the model's, every parameter of the model must come from the file (a tied head from the
token embedding), and the weights must load in float32.

Prints one JSON line {"model", "max_abs_diff", "max_abs", "relative"} and exits 0 when
relative = max |hf - troupe| / max |troupe| <= 1e-5 (fp32), 1 otherwise, 2 for a
directory the model does not load as it is.

The C++ side (tests/trainers/export_test.cc) writes the inputs and runs this with the
Python of tests/reference/setup_reference_env.sh (PyTorch, transformers, safetensors).
"""

import json
import os
import struct
import sys

import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM
from transformers.utils import logging as hf_logging


def main():
    model_dir, tokens_path, logits_path = sys.argv[1:4]
    hf_logging.disable_progress_bar()
    model, info = AutoModelForCausalLM.from_pretrained(model_dir, output_loading_info=True)
    model.eval()
    # Buffers GPT-2's attention keeps (its causal mask) are not parameters to load.
    allowed = lambda k: k.endswith(".attn.bias") or k.endswith(".attn.masked_bias")
    missing = [k for k in info.get("missing_keys", []) if not allowed(k)]
    unexpected = list(info.get("unexpected_keys", []))
    mismatched = [str(m) for m in info.get("mismatched_keys", [])]
    if missing or unexpected or mismatched:
        print(json.dumps({"missing": missing, "unexpected": unexpected, "mismatched": mismatched}))
        return 2
    if model.dtype != torch.float32:
        print(json.dumps({"error": f"loaded as {model.dtype}, not float32"}))
        return 2
    config = model.config
    state = load_file(os.path.join(model_dir, "model.safetensors"))
    embedding = model.get_input_embeddings().weight
    head = model.get_output_embeddings().weight
    if getattr(config, "tie_word_embeddings", True):
        if "lm_head.weight" in state:
            print(json.dumps({"error": "a tied head has a tensor of its own in the file"}))
            return 2
        if not torch.equal(head, embedding):
            print(json.dumps({"error": "lm_head is not tied to the token embedding"}))
            return 2
    elif not torch.equal(head, state["lm_head.weight"]):
        print(json.dumps({"error": "lm_head is not the file's lm_head.weight"}))
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
    print(json.dumps({"model": type(model).__name__, "max_abs_diff": diff, "max_abs": scale,
                      "relative": relative}))
    return 0 if relative <= 1e-5 else 1


if __name__ == "__main__":
    sys.exit(main())
