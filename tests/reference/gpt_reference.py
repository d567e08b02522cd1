#!/usr/bin/env python3
"""PyTorch reference for troupe's GPT model (nn/gpt.h); writes gpt_fixture.bin.

The model is llm.c's GPT-2: token + position embedding, pre-LN blocks of causal
self-attention and a GELU (tanh approximation) MLP, a final LayerNorm, and an LM
head tied to wte. LayerNorm eps 1e-5, attention scale 1/sqrt(head size), loss
the mean cross-entropy over the B*T positions. The vocabulary is padded, as in
llm.c: wte has Vp >= V rows, rows [V, Vp) are zero and the softmax covers the
first V logits only.

Parameters, in the order of troupe's flat buffer (one tensor after the other,
row-major; L blocks, each of its 12 tensors together):

    wte [Vp, C], wpe [maxT, C],
    for each layer l in 0..L-1:
        ln1w [C], ln1b [C], qkvw [3C, C], qkvb [3C], attprojw [C, C], attprojb [C],
        ln2w [C], ln2b [C], fcw [4C, C], fcb [4C], fcprojw [C, 4C], fcprojb [C],
    lnfw [C], lnfb [C].

(llm.c stacks each block tensor over the layers - all ln1w, then all ln1b; troupe
keeps a block's tensors together so a pipeline stage owns one contiguous range.)

Initialisation is GPT-2's (normal(0, 0.02), attprojw and fcprojw scaled by
1/sqrt(2L), padding rows of wte zero), then the LayerNorm weights and all biases
are perturbed away from 1 and 0 so that every parameter shapes the output.

The optimizer is torch.optim.AdamW(lr 1e-3, betas (0.9, 0.95), eps 1e-8) for 10
steps on the same batch, with weight_decay 0.1 on the 2-D tensors (wte, wpe,
qkvw, attprojw, fcw, fcprojw) and 0 on the 1-D ones (biases and LayerNorm
weights), as llm.c's train_gpt2.py and nanoGPT configure it (troupe:
GPTParamLayout::no_decay_ranges()).

Fixture layout (little-endian; int32 unless noted):

    header   int32[16]: magic 20251129, version 1, V, Vp, maxT, L, NH, C, B, T,
             num_steps, decay_mode, num_params, 0, 0, 0
             (decay_mode 0: every parameter decays; 1: only the 2-D tensors)
    hparams  float32[8]: lr, beta1, beta2, eps, weight_decay, 0, 0, 0
    inputs   int32[B*T]
    targets  int32[B*T]
    params   float32[num_params]          initial parameters, in the order above
    logits   float32[B*T*Vp]              forward at the initial parameters
    loss     float32[1]
    grads    float32[num_params]          d loss / d params at the initial parameters
    losses   float32[num_steps]           losses[i]: the loss before AdamW step i+1
    final    float32[num_params]          parameters after num_steps AdamW steps

Regenerate (CI does not run this; the fixture is committed):

    python3 tests/reference/gpt_reference.py   # needs PyTorch (Debian: python3-torch)
"""

import math
import os
import struct

import torch
import torch.nn.functional as F

MAGIC = 20251129
VERSION = 1

# Tiny config: V < Vp exercises the padded vocabulary.
V, VP, MAX_T, L, NH, C = 61, 64, 16, 2, 4, 32
B, T = 2, 16
NUM_STEPS = 10
LR, BETA1, BETA2, EPS, WEIGHT_DECAY = 1e-3, 0.9, 0.95, 1e-8, 0.1
DECAY_MODE = 1  # weight decay on the 2-D tensors only
SEED = 1337

BLOCK_TENSORS = [  # name, shape
    ("ln1w", (C,)), ("ln1b", (C,)), ("qkvw", (3 * C, C)), ("qkvb", (3 * C,)),
    ("attprojw", (C, C)), ("attprojb", (C,)), ("ln2w", (C,)), ("ln2b", (C,)),
    ("fcw", (4 * C, C)), ("fcb", (4 * C,)), ("fcprojw", (C, 4 * C)), ("fcprojb", (C,)),
]


def parameter_shapes():
    """(name, shape) of every parameter tensor, in flat-buffer order."""
    shapes = [("wte", (VP, C)), ("wpe", (MAX_T, C))]
    for l in range(L):
        shapes += [(f"h{l}.{name}", shape) for name, shape in BLOCK_TENSORS]
    return shapes + [("lnfw", (C,)), ("lnfb", (C,))]


def init_parameters(gen):
    params = {}
    for name, shape in parameter_shapes():
        base = name.split(".")[-1]
        if base in ("wte", "wpe", "qkvw", "fcw"):
            p = torch.randn(shape, generator=gen) * 0.02
        elif base in ("attprojw", "fcprojw"):
            p = torch.randn(shape, generator=gen) * (0.02 / math.sqrt(2 * L))
        elif base.endswith("w"):  # LayerNorm weights: 1, perturbed
            p = 1.0 + 0.1 * torch.randn(shape, generator=gen)
        else:  # biases: 0, perturbed
            p = 0.02 * torch.randn(shape, generator=gen)
        if base == "wte":
            p[V:] = 0.0
        params[name] = p.float().requires_grad_(True)
    return params


def forward(p, inputs, targets):
    """Returns (logits [B, T, Vp], loss)."""
    hs = C // NH
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    x = p["wte"][inputs] + p["wpe"][:T]
    for l in range(L):
        w = {name: p[f"h{l}.{name}"] for name, _ in BLOCK_TENSORS}
        h = F.layer_norm(x, (C,), w["ln1w"], w["ln1b"], eps=1e-5)
        qkv = h @ w["qkvw"].T + w["qkvb"]
        q, k, v = (t.view(B, T, NH, hs).transpose(1, 2) for t in qkv.split(C, dim=2))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        x = x + (y @ w["attprojw"].T + w["attprojb"])
        h = F.layer_norm(x, (C,), w["ln2w"], w["ln2b"], eps=1e-5)
        h = F.gelu(h @ w["fcw"].T + w["fcb"], approximate="tanh")
        x = x + (h @ w["fcprojw"].T + w["fcprojb"])
    x = F.layer_norm(x, (C,), p["lnfw"], p["lnfb"], eps=1e-5)
    logits = x @ p["wte"].T
    loss = F.cross_entropy(logits[..., :V].reshape(-1, V), targets.reshape(-1))
    return logits, loss


def flat(tensors):
    return torch.cat([t.detach().reshape(-1) for t in tensors])


def main():
    torch.manual_seed(SEED)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    gen = torch.Generator().manual_seed(SEED)

    params = init_parameters(gen)
    order = [params[name] for name, _ in parameter_shapes()]
    inputs = torch.randint(0, V, (B, T), generator=gen, dtype=torch.int64)
    targets = torch.randint(0, V, (B, T), generator=gen, dtype=torch.int64)
    initial = flat(order)

    groups = [{"params": [t for t in order if t.dim() >= 2], "weight_decay": WEIGHT_DECAY},
              {"params": [t for t in order if t.dim() < 2], "weight_decay": 0.0}]
    optimizer = torch.optim.AdamW(groups, lr=LR, betas=(BETA1, BETA2), eps=EPS)
    losses = []
    for step in range(NUM_STEPS):
        optimizer.zero_grad(set_to_none=True)
        logits, loss = forward(params, inputs, targets)
        loss.backward()
        if step == 0:
            logits0, loss0 = logits.detach().clone(), loss.item()
            grads0 = flat([t.grad for t in order])
        losses.append(loss.item())
        optimizer.step()
    final = flat(order)

    n = initial.numel()
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpt_fixture.bin")
    with open(out, "wb") as f:
        f.write(struct.pack("<16i", MAGIC, VERSION, V, VP, MAX_T, L, NH, C, B, T, NUM_STEPS,
                            DECAY_MODE, n, 0, 0, 0))
        f.write(struct.pack("<8f", LR, BETA1, BETA2, EPS, WEIGHT_DECAY, 0, 0, 0))
        f.write(inputs.to(torch.int32).numpy().astype("<i4").tobytes())
        f.write(targets.to(torch.int32).numpy().astype("<i4").tobytes())
        for t in (initial, logits0.reshape(-1), torch.tensor([loss0]), grads0,
                  torch.tensor(losses), final):
            f.write(t.to(torch.float32).numpy().astype("<f4").tobytes())
    print(f"wrote {out}: {n} parameters, loss {loss0:.6f} -> {losses[-1]:.6f} "
          f"after {NUM_STEPS} steps")


if __name__ == "__main__":
    main()
