#!/usr/bin/env python3
"""Hugging Face reference for troupe's Llama model (nn/llama/llama.h); writes llama_fixture.bin.

The reference is transformers' LlamaForCausalLM itself, built offline from a LlamaConfig
(random initialisation, fp32, attn_implementation="eager"): RMSNorm, rotary embeddings in the
rotate-half layout, grouped-query attention, a SwiGLU MLP, a final RMSNorm and an LM head tied
to the embedding or its own. The RMSNorm weights are perturbed away from 1 so that every
parameter shapes the output. The loss is the mean cross-entropy of the logits at each position
against targets (not the model's own shifted-label loss).

troupe pads the vocabulary: its embedding and head have Vp >= V rows, rows [V, Vp) zero, and
the softmax covers the first V logits only. The fixture holds troupe's padded buffers: padding
rows and logit columns are zero.

Parameters, in the order of troupe's flat buffer (Hugging Face's names; nn/llama/layout.h):

    model.embed_tokens.weight [Vp, C],
    for each layer l: model.layers.<l>.input_layernorm.weight [C],
        .self_attn.{q,k,v,o}_proj.weight, .post_attention_layernorm.weight [C],
        .mlp.{gate,up,down}_proj.weight,
    model.norm.weight [C], and unless tied lm_head.weight [Vp, C].

The optimizer is torch.optim.AdamW(lr 1e-3, betas (0.9, 0.95), eps 1e-8) for 10 steps on the
same batch, weight decay 0.1 on the matrices and 0 on the norm weights (troupe:
ModelLayout::no_decay_ranges()).

Fixture layout (little-endian; int32 unless noted):

    file header  int32[4]: magic 20260301, version 1, num_cases, 0
    per case:
      header   int32[16]: V, Vp, maxT, L, NH, KV, C, I, tied, B, T, num_steps, num_params, 0, 0, 0
      hparams  float32[8]: lr, beta1, beta2, eps, weight_decay, rms_norm_eps, rope_theta, 0
      inputs   int32[B*T]
      targets  int32[B*T]
      params   float32[num_params]     initial parameters, in the order above
      logits   float32[B*T*Vp]         forward at the initial parameters
      loss     float32[1]
      grads    float32[num_params]     d loss / d params at the initial parameters
      losses   float32[num_steps]      losses[i]: the loss before AdamW step i+1

Regenerate (CI does not run this; the fixture is committed):

    python3 tests/reference/llama_reference.py   # needs PyTorch and transformers
"""

import os
import struct

import torch
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaForCausalLM

MAGIC = 20260301
VERSION = 1

# Tiny configs (the fixture stays small): V < Vp exercises the padded vocabulary.
V, VP, MAX_T, L, C, I = 61, 64, 16, 2, 16, 32
B, T = 2, 16
NUM_STEPS = 10
LR, BETA1, BETA2, EPS, WEIGHT_DECAY = 1e-3, 0.9, 0.95, 1e-8, 0.1
RMS_EPS, ROPE_THETA = 1e-5, 10000.0
SEED = 1337

CASES = [  # (num_attention_heads, num_key_value_heads, tie_word_embeddings)
    (4, 2, False),  # grouped-query attention, its own head
    (4, 2, True),   # grouped-query attention, tied head
    (4, 4, False),  # one KV head per query head
]

BLOCK_TENSORS = ["input_layernorm", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                 "self_attn.o_proj", "post_attention_layernorm", "mlp.gate_proj", "mlp.up_proj",
                 "mlp.down_proj"]


def parameter_names(tied):
    names = ["model.embed_tokens.weight"]
    for l in range(L):
        names += [f"model.layers.{l}.{t}.weight" for t in BLOCK_TENSORS]
    names.append("model.norm.weight")
    if not tied:
        names.append("lm_head.weight")
    return names


def padded(name, t):
    """A tensor as troupe holds it: the vocabulary's tensors with Vp - V zero rows."""
    t = t.detach()
    if name in ("model.embed_tokens.weight", "lm_head.weight"):
        t = torch.cat([t, torch.zeros(VP - V, *t.shape[1:])])
    return t.reshape(-1)


def build(nh, kv, tied, gen):
    config = LlamaConfig(vocab_size=V, hidden_size=C, intermediate_size=I, num_hidden_layers=L,
                         num_attention_heads=nh, num_key_value_heads=kv,
                         max_position_embeddings=MAX_T, rms_norm_eps=RMS_EPS,
                         rope_theta=ROPE_THETA, tie_word_embeddings=tied, attention_bias=False,
                         mlp_bias=False, attn_implementation="eager")
    model = LlamaForCausalLM(config).float()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("layernorm.weight") or name == "model.norm.weight":
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
    return model


def run_case(nh, kv, tied, gen):
    model = build(nh, kv, tied, gen)
    params = dict(model.named_parameters())
    names = parameter_names(tied)
    assert set(names) == set(params), sorted(set(params) ^ set(names))
    inputs = torch.randint(0, V, (B, T), generator=gen, dtype=torch.int64)
    targets = torch.randint(0, V, (B, T), generator=gen, dtype=torch.int64)
    initial = torch.cat([padded(n, params[n]) for n in names])

    groups = [{"params": [params[n] for n in names if params[n].dim() >= 2],
               "weight_decay": WEIGHT_DECAY},
              {"params": [params[n] for n in names if params[n].dim() < 2], "weight_decay": 0.0}]
    optimizer = torch.optim.AdamW(groups, lr=LR, betas=(BETA1, BETA2), eps=EPS)
    losses = []
    for step in range(NUM_STEPS):
        optimizer.zero_grad(set_to_none=True)
        logits = model(input_ids=inputs).logits
        loss = F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))
        loss.backward()
        if step == 0:
            logits0 = torch.cat([logits.detach(), torch.zeros(B, T, VP - V)], dim=-1)
            loss0 = loss.item()
            grads0 = torch.cat([padded(n, params[n].grad) for n in names])
        losses.append(loss.item())
        optimizer.step()

    n = initial.numel()
    out = struct.pack("<16i", V, VP, MAX_T, L, nh, kv, C, I, int(tied), B, T, NUM_STEPS, n,
                      0, 0, 0)
    out += struct.pack("<8f", LR, BETA1, BETA2, EPS, WEIGHT_DECAY, RMS_EPS, ROPE_THETA, 0)
    out += inputs.to(torch.int32).numpy().astype("<i4").tobytes()
    out += targets.to(torch.int32).numpy().astype("<i4").tobytes()
    for t in (initial, logits0.reshape(-1), torch.tensor([loss0]), grads0, torch.tensor(losses)):
        out += t.to(torch.float32).numpy().astype("<f4").tobytes()
    print(f"heads {nh}, kv heads {kv}, {'tied' if tied else 'untied'}: {n} parameters, "
          f"loss {loss0:.6f} -> {losses[-1]:.6f} after {NUM_STEPS} steps")
    return out


def main():
    torch.manual_seed(SEED)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    gen = torch.Generator().manual_seed(SEED)
    data = struct.pack("<4i", MAGIC, VERSION, len(CASES), 0)
    for nh, kv, tied in CASES:
        data += run_case(nh, kv, tied, gen)
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "llama_fixture.bin")
    with open(out, "wb") as f:
        f.write(data)
    print(f"wrote {out}: {len(data)} bytes")


if __name__ == "__main__":
    main()
