#!/usr/bin/env python3
"""PyTorch's side of nanogpt_bench: nanoGPT's model.py and train.py loop on the same data.

    nanogpt_bench_peer.py --train DATA.bin --val DATA_val.bin --threads T --steps N
                          [--warmup-iters 100] [--lr-decay-iters N] [--parent-pid PID]

The model is nanoGPT's GPT (model.py) with its Shakespeare character-level CPU configuration:
n_layer 4, n_head 4, n_embd 128, block_size 64, vocab 256 (troupe's byte tokens), dropout 0.
Written as model.py writes it: a LayerNorm module over F.layer_norm, CausalSelfAttention with one
c_attn projection split into q, k, v and F.scaled_dot_product_attention(is_causal=True), an MLP
c_fc -> GELU -> c_proj, pre-LN blocks, the LM head's weight tied to wte, model.py's
initialisation (N(0, 0.02), c_proj weights N(0, 0.02 / sqrt(2 n_layer)), zero biases). Two
choices make it the same model as troupe's GPT-2: bias=True (nanoGPT's train.py defaults to
False) and the tanh form of GELU (troupe's; model.py's nn.GELU() is the erf form, the same cost).

The loop is train.py's: get_batch draws batch_size 12 random windows of block_size from the
train .bin (raw little-endian uint16, as nanoGPT's prepare.py writes train.bin) through a fresh
np.memmap; torch.optim.AdamW built by configure_optimizers (weight decay 0.1 on the parameters
of 2 or more dimensions, 0 on the others; betas (0.9, 0.99); no fused or foreach argument, as
nanoGPT on the CPU); get_lr: linear warm-up over warmup_iters to 1e-3, cosine decay to min_lr
1e-4 at lr_decay_iters; grad clip 1.0 (clip_grad_norm_); zero_grad(set_to_none=True). One
iteration, timed with time.perf_counter as train.py's dt, is: set the lr, forward, the next
get_batch, backward, clip, optimizer.step, zero_grad. No evaluation during training (train.py's
GradScaler is disabled in fp32 and left out). torch.manual_seed(1337); torch.set_num_threads(T).

At the end: the validation loss, model.eval() under torch.no_grad(), over every non-overlapping
window of the val .bin (window i: inputs [64 i, 64 i + 64), targets shifted by one), as troupe's
trainer scores its validation split: the mean cross-entropy over all their tokens.

Prints one JSON object on the last line of stdout: torch_version, threads, steps, params,
tokens_per_s (the whole run: N x 12 x 64 / the sum of the iterations' times), tokens_per_s_median
(12 x 64 / the median iteration after the first 10), step_s_median, step_s_p90, slow_steps (the
iterations over twice the median) and slow_share (their share of the time), loss_first,
loss_last, val_loss, val_windows, cpu_share (CPU time / (wall time x threads) over the iterations). Without
torch or numpy: {"skipped": "..."} and exit status 0. Progress goes to stderr.
"""

import argparse
import json
import math
import os
import statistics
import sys
import time

from peer_watchdog import exit_with_parent

try:
    import numpy as np
    import torch
    import torch.nn as nn
    from torch.nn import functional as F
except ImportError as e:  # the bench runs without its peer
    print(f"skipped: {e}", file=sys.stderr)
    print(json.dumps({"skipped": f"cannot import {e.name}"}))
    sys.exit(0)

# ---- model.py ----------------------------------------------------------------------------


class LayerNorm(nn.Module):
    """LayerNorm but with an optional bias. PyTorch doesn't support simply bias=False"""

    def __init__(self, ndim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, input):
        return F.layer_norm(input, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        assert config["n_embd"] % config["n_head"] == 0
        self.c_attn = nn.Linear(config["n_embd"], 3 * config["n_embd"], bias=config["bias"])
        self.c_proj = nn.Linear(config["n_embd"], config["n_embd"], bias=config["bias"])
        self.attn_dropout = nn.Dropout(config["dropout"])
        self.resid_dropout = nn.Dropout(config["dropout"])
        self.n_head = config["n_head"]
        self.n_embd = config["n_embd"]
        self.dropout = config["dropout"]

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        y = F.scaled_dot_product_attention(
            q, k, v, attn_mask=None, dropout_p=self.dropout if self.training else 0,
            is_causal=True)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.c_fc = nn.Linear(config["n_embd"], 4 * config["n_embd"], bias=config["bias"])
        self.gelu = nn.GELU(approximate="tanh")
        self.c_proj = nn.Linear(4 * config["n_embd"], config["n_embd"], bias=config["bias"])
        self.dropout = nn.Dropout(config["dropout"])

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.ln_1 = LayerNorm(config["n_embd"], bias=config["bias"])
        self.attn = CausalSelfAttention(config)
        self.ln_2 = LayerNorm(config["n_embd"], bias=config["bias"])
        self.mlp = MLP(config)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(config["vocab_size"], config["n_embd"]),
            wpe=nn.Embedding(config["block_size"], config["n_embd"]),
            drop=nn.Dropout(config["dropout"]),
            h=nn.ModuleList([Block(config) for _ in range(config["n_layer"])]),
            ln_f=LayerNorm(config["n_embd"], bias=config["bias"]),
        ))
        self.lm_head = nn.Linear(config["n_embd"], config["vocab_size"], bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying
        self.apply(self._init_weights)
        for pn, p in self.named_parameters():
            if pn.endswith("c_proj.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config["n_layer"]))

    def get_num_params(self):
        return sum(p.numel() for p in self.parameters())

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets=None):
        device = idx.device
        b, t = idx.size()
        pos = torch.arange(0, t, dtype=torch.long, device=device)
        tok_emb = self.transformer.wte(idx)
        pos_emb = self.transformer.wpe(pos)
        x = self.transformer.drop(tok_emb + pos_emb)
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        logits = self.lm_head(x)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1),
                               ignore_index=-1)
        return logits, loss

    def configure_optimizers(self, weight_decay, learning_rate, betas):
        param_dict = {pn: p for pn, p in self.named_parameters() if p.requires_grad}
        decay_params = [p for n, p in param_dict.items() if p.dim() >= 2]
        nodecay_params = [p for n, p in param_dict.items() if p.dim() < 2]
        optim_groups = [
            {"params": decay_params, "weight_decay": weight_decay},
            {"params": nodecay_params, "weight_decay": 0.0},
        ]
        # nanoGPT asks for fused=True on CUDA only: on the CPU, PyTorch's default.
        return torch.optim.AdamW(optim_groups, lr=learning_rate, betas=betas)


# ---- train.py ----------------------------------------------------------------------------


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--train", required=True)
    p.add_argument("--val", required=True)
    p.add_argument("--threads", type=int, required=True)
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--warmup-iters", type=int, default=100)
    p.add_argument("--lr-decay-iters", type=int, default=0, help="0: --steps")
    p.add_argument("--parent-pid", type=int, default=0)
    args = p.parse_args()
    exit_with_parent(args.parent_pid, "nanogpt_bench_peer")

    batch_size, block_size = 12, 64
    learning_rate, min_lr = 1e-3, 1e-4
    warmup_iters = args.warmup_iters
    lr_decay_iters = args.lr_decay_iters or args.steps
    weight_decay, beta1, beta2, grad_clip = 1e-1, 0.9, 0.99, 1.0
    config = dict(n_layer=4, n_head=4, n_embd=128, block_size=block_size, vocab_size=256,
                  dropout=0.0, bias=True)

    torch.set_num_threads(args.threads)
    torch.manual_seed(1337)

    def get_batch(path):
        # nanoGPT recreates the memmap every batch to avoid a memory leak.
        data = np.memmap(path, dtype=np.uint16, mode="r")
        ix = torch.randint(len(data) - block_size, (batch_size,))
        x = torch.stack([torch.from_numpy((data[i:i + block_size]).astype(np.int64)) for i in ix])
        y = torch.stack(
            [torch.from_numpy((data[i + 1:i + 1 + block_size]).astype(np.int64)) for i in ix])
        return x, y

    def get_lr(it):
        if it < warmup_iters:
            return learning_rate * (it + 1) / (warmup_iters + 1)
        if it > lr_decay_iters:
            return min_lr
        decay_ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
        coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))
        return min_lr + coeff * (learning_rate - min_lr)

    model = GPT(config)
    optimizer = model.configure_optimizers(weight_decay, learning_rate, (beta1, beta2))
    model.train()
    print(f"nanogpt_bench_peer: torch {torch.__version__}, {args.threads} threads, "
          f"{model.get_num_params()} parameters, {args.steps} steps", file=sys.stderr, flush=True)

    step_times, losses = [], []
    X, Y = get_batch(args.train)
    cpu0 = time.process_time()
    for iter_num in range(args.steps):
        t0 = time.perf_counter()
        lr = get_lr(iter_num)
        for param_group in optimizer.param_groups:
            param_group["lr"] = lr
        logits, loss = model(X, Y)
        X, Y = get_batch(args.train)  # prefetch as train.py does, while the loss waits
        loss.backward()
        if grad_clip != 0.0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        lossf = loss.item()
        step_times.append(time.perf_counter() - t0)
        losses.append(lossf)
        if (iter_num + 1) % 100 == 0 or iter_num + 1 == args.steps:
            print(f"nanogpt_bench_peer: iter {iter_num + 1}: loss {lossf:.4f}, "
                  f"time {step_times[-1] * 1000:.2f}ms", file=sys.stderr, flush=True)
    cpu = time.process_time() - cpu0
    wall = sum(step_times)
    for lossf in losses:
        if not math.isfinite(lossf):
            sys.exit("nanogpt_bench_peer: the training loss is not finite")

    # Every non-overlapping window of the validation split.
    model.eval()
    val = np.memmap(args.val, dtype=np.uint16, mode="r")
    windows = (len(val) - 1) // block_size
    total, count = 0.0, 0
    with torch.no_grad():
        for start in range(0, windows, 256):
            ids = range(start, min(windows, start + 256))
            x = torch.stack([torch.from_numpy(
                val[i * block_size:(i + 1) * block_size].astype(np.int64)) for i in ids])
            y = torch.stack([torch.from_numpy(
                val[i * block_size + 1:(i + 1) * block_size + 1].astype(np.int64)) for i in ids])
            _, loss = model(x, y)
            total += loss.item() * y.numel()
            count += y.numel()
    val_loss = total / max(1, count)
    print(f"nanogpt_bench_peer: validation loss {val_loss:.4f} over {windows} windows",
          file=sys.stderr, flush=True)

    tokens = batch_size * block_size
    timed = step_times[10:] if len(step_times) > 10 else step_times
    median = statistics.median(timed)
    ordered = sorted(timed)
    slow = [t for t in step_times if t > 2 * median]
    print(json.dumps({
        "torch_version": torch.__version__, "threads": args.threads, "steps": args.steps,
        "params": model.get_num_params(), "tokens_per_s": args.steps * tokens / wall,
        "tokens_per_s_median": tokens / median, "step_s_median": median,
        "step_s_p90": ordered[int(0.9 * (len(ordered) - 1))], "slow_steps": len(slow),
        "slow_share": sum(slow) / wall,
        "loss_first": losses[0], "loss_last": losses[-1], "val_loss": val_loss,
        "val_windows": windows, "cpu_share": cpu / (wall * args.threads),
    }))


if __name__ == "__main__":
    main()
