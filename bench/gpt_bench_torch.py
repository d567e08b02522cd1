#!/usr/bin/env python3
"""PyTorch's side of gpt_bench: the same GPT training step, written as PyTorch users write it.

    gpt_bench_torch.py --threads N --steps S --warmup W --repeat R
                       --config NAME:L:C:NH:V:T:B [--config ...] [--parent-pid PID]

For each config: a GPT-2 style model (the architecture of tests/reference/gpt_reference.py:
token + position embedding, pre-LN blocks of causal self-attention and a tanh-GELU MLP, a final
LayerNorm, an LM head tied to the token embedding; LayerNorm eps 1e-5, loss the mean
cross-entropy over the B*T positions), trained on random tokens with
torch.optim.AdamW(lr 1e-4, betas (0.9, 0.95), eps 1e-8, weight decay 0.1 on the 2-D tensors
and 0 on the 1-D ones; PyTorch's default implementation for CPU tensors, neither fused nor
foreach requested). One step is

    optimizer.zero_grad(); loss = model(x, y); loss.backward(); optimizer.step()

timed with time.perf_counter (CPU tensors: every op has finished when it returns). W warm-up
steps, then R repeats of S steps; a repeat's figure is its median step time, the config's the
median over repeats. Attention is F.scaled_dot_product_attention(is_causal=True) where torch
has it (2.0 and later; on the CPU that is its flash-attention kernel), else the plain
masked-softmax form of the reference. torch.set_num_threads(N) as gpt_bench's --threads.

Prints one JSON object on the last line of stdout: torch_version, the attention used, and for
config NAME the keys "NAME.step_s", "NAME.tokens_per_s", "NAME.params", "NAME.loss_first",
"NAME.loss_last" and "NAME.cpu_share" (CPU time / (wall time x threads) over the timed steps).
Progress goes to stderr.
"""

import argparse
import json
import math
import os
import statistics
import sys
import time

from peer_watchdog import exit_with_parent

import torch
import torch.nn as nn
import torch.nn.functional as F

HAVE_SDPA = hasattr(F, "scaled_dot_product_attention")


class Block(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.NH = NH
        self.ln1 = nn.LayerNorm(C, eps=1e-5)
        self.qkv = nn.Linear(C, 3 * C)
        self.attproj = nn.Linear(C, C)
        self.ln2 = nn.LayerNorm(C, eps=1e-5)
        self.fc = nn.Linear(C, 4 * C)
        self.fcproj = nn.Linear(4 * C, C)

    def attention(self, x):
        B, T, C = x.shape
        hs = C // self.NH
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.NH, hs).transpose(1, 2) for t in (q, k, v))
        if HAVE_SDPA:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
            y = att @ v
        return self.attproj(y.transpose(1, 2).contiguous().view(B, T, C))

    def forward(self, x):
        x = x + self.attention(self.ln1(x))
        return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, L, C, NH, V, max_T):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(max_T, C)
        self.blocks = nn.ModuleList(Block(C, NH) for _ in range(L))
        self.lnf = nn.LayerNorm(C, eps=1e-5)
        # GPT-2's initialisation, as troupe's GPT::init_parameters.
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() < 2:  # LayerNorm weights
                nn.init.ones_(p)
            elif name.endswith("attproj.weight") or name.endswith("fcproj.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * L))
            else:
                nn.init.normal_(p, 0.0, 0.02)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe.weight[:T]
        for block in self.blocks:
            x = block(x)
        logits = F.linear(self.lnf(x), self.wte.weight)  # the tied LM head
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def run_config(name, L, C, NH, V, T, B, args):
    torch.manual_seed(1337)
    model = GPT(L, C, NH, V, T)
    params = list(model.parameters())
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    optimizer = torch.optim.AdamW(groups, lr=1e-4, betas=(0.9, 0.95), eps=1e-8)
    gen = torch.Generator().manual_seed(1)
    x = torch.randint(0, V, (B, T), generator=gen)
    y = torch.randint(0, V, (B, T), generator=gen)

    def step():
        start = time.perf_counter()
        optimizer.zero_grad()
        loss = model(x, y)
        loss.backward()
        optimizer.step()
        return time.perf_counter() - start, loss.item()

    losses = []
    for _ in range(args.warmup):
        losses.append(step()[1])
    medians = []
    wall = 0.0
    cpu_start = time.process_time()
    for _ in range(args.repeat):
        times = []
        for _ in range(args.steps):
            seconds, loss = step()
            times.append(seconds)
            wall += seconds
            losses.append(loss)
        medians.append(statistics.median(times))
    step_s = statistics.median(medians)
    # As gpt_bench's: CPU time over the timed steps / (wall time x threads); well below 1 when
    # other processes took the cores.
    cpu = time.process_time() - cpu_start
    cpu_share = cpu / (wall * torch.get_num_threads())
    cpu_per_step = cpu / (args.repeat * args.steps)
    if not all(math.isfinite(v) for v in losses):
        raise RuntimeError(f"{name}: a loss is not finite: {losses}")
    print(f"torch: {name}: {step_s * 1e3:.1f} ms/step, {B * T / step_s:.0f} tokens/s, "
          f"loss {losses[0]:.4f} -> {losses[-1]:.4f}, "
          f"cpu {cpu_share:.0%} ({cpu_per_step * 1e3:.1f} ms/step), "
          f"load {os.getloadavg()[0]:.1f}", file=sys.stderr, flush=True)
    return {
        f"{name}.step_s": step_s,
        f"{name}.tokens_per_s": B * T / step_s,
        f"{name}.params": sum(p.numel() for p in params),
        f"{name}.loss_first": losses[0],
        f"{name}.loss_last": losses[-1],
        f"{name}.cpu_share": cpu_share,
        f"{name}.cpu_s_per_step": cpu_per_step,
    }


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, required=True)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--config", action="append", default=[],
                   help="NAME:L:C:NH:V:T:B (may repeat)")
    p.add_argument("--parent-pid", type=int, default=0,
                   help="exit when this process has exited")
    args = p.parse_args()
    exit_with_parent(args.parent_pid, "gpt_bench_torch")
    torch.set_num_threads(args.threads)
    result = {
        "torch_version": torch.__version__,
        "attention": "scaled_dot_product_attention" if HAVE_SDPA else "masked softmax",
        "threads": torch.get_num_threads(),
    }
    for spec in args.config:
        name, *dims = spec.split(":")
        result.update(run_config(name, *(int(d) for d in dims), args))
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
