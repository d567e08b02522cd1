#!/usr/bin/env python3
"""PyTorch's side of gpt_bench: the same training step, written as PyTorch users write it.

    gpt_bench_torch.py --threads N --steps S --warmup W --repeat R
                       --config NAME:L:C:NH:V:T:B [--config ...]
                       --llama-config NAME:L:C:NH:KV:I:V:T:B [--llama-config ...]
                       [--llama-impl auto|transformers|plain] [--parent-pid PID]

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

A --llama-config is a Llama model of troupe's nn/llama (RMSNorm eps 1e-6, rotary embeddings with
theta 1e4 in the rotate-half layout, KV key/value heads shared by groups of the NH query heads, a
SwiGLU MLP of width I, no biases, an untied head, max_position_embeddings = T): transformers'
LlamaForCausalLM built from a LlamaConfig (attn_implementation="sdpa", fp32, use_cache off)
when transformers imports (--llama-impl auto or transformers), else
(--llama-impl plain, or auto without transformers) the plain PyTorch Llama below
(F.scaled_dot_product_attention with is_causal=True, the key/value heads repeat_interleave'd per
group). Either way the loss is the mean cross-entropy of logits[b, t] against targets[b, t] over
the B*T positions, computed here from the logits (not transformers' shifted-label loss), as
troupe's model computes it; troupe's initialisation (init_llama); the same AdamW and decay
groups (the norms' weights are the 1-D tensors).

Prints one JSON object on the last line of stdout: torch_version, the attention used, the Llama
implementation ("llama", when a --llama-config ran), and for
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


class RMSNorm(nn.Module):
    def __init__(self, C, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(C))

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class LlamaBlock(nn.Module):
    def __init__(self, C, NH, KV, I):
        super().__init__()
        self.NH, self.KV, self.hd = NH, KV, C // NH
        self.input_layernorm = RMSNorm(C)
        self.q_proj = nn.Linear(C, NH * self.hd, bias=False)
        self.k_proj = nn.Linear(C, KV * self.hd, bias=False)
        self.v_proj = nn.Linear(C, KV * self.hd, bias=False)
        self.o_proj = nn.Linear(NH * self.hd, C, bias=False)
        self.post_attention_layernorm = RMSNorm(C)
        self.gate_proj = nn.Linear(C, I, bias=False)
        self.up_proj = nn.Linear(C, I, bias=False)
        self.down_proj = nn.Linear(I, C, bias=False)

    def attention(self, x, cos, sin):
        B, T, C = x.shape
        q = self.q_proj(x).view(B, T, self.NH, self.hd).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.KV, self.hd).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.KV, self.hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        group = self.NH // self.KV
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(y.transpose(1, 2).reshape(B, T, self.NH * self.hd))

    def forward(self, x, cos, sin):
        x = x + self.attention(self.input_layernorm(x), cos, sin)
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class PlainLlama(nn.Module):
    def __init__(self, L, C, NH, KV, I, V, max_T, theta=10000.0):
        super().__init__()
        self.embed_tokens = nn.Embedding(V, C)
        self.layers = nn.ModuleList(LlamaBlock(C, NH, KV, I) for _ in range(L))
        self.norm = RMSNorm(C)
        self.lm_head = nn.Linear(C, V, bias=False)
        hd = C // NH
        inv_freq = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float) / hd))
        angles = torch.outer(torch.arange(max_T, dtype=torch.float), inv_freq)
        angles = torch.cat((angles, angles), dim=-1)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)
        init_llama(self, L)

    def forward(self, idx):
        T = idx.shape[1]
        cos, sin = self.cos[:T], self.sin[:T]
        x = self.embed_tokens(idx)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.lm_head(self.norm(x))


def init_llama(model, L):
    """troupe's Llama initialisation (nn/llama/llama.cc): N(0, 0.02) for the matrices,
    N(0, 0.02 / sqrt(2 L)) for o_proj and down_proj, ones for the norms' weights."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() < 2:
                nn.init.ones_(p)
            elif name.endswith("o_proj.weight") or name.endswith("down_proj.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * L))
            else:
                nn.init.normal_(p, 0.0, 0.02)


def transformers_llama():
    """transformers' (LlamaConfig, LlamaForCausalLM, version), or None if it does not import."""
    try:
        import transformers
        from transformers import LlamaConfig, LlamaForCausalLM
    except Exception:  # noqa: BLE001 - any failure to import means: not available
        return None
    return LlamaConfig, LlamaForCausalLM, transformers.__version__


class HFLlama(nn.Module):
    """transformers' LlamaForCausalLM, returning its logits."""

    def __init__(self, hf, L, C, NH, KV, I, V, max_T):
        super().__init__()
        LlamaConfig, LlamaForCausalLM, _ = hf
        config = LlamaConfig(
            vocab_size=V, hidden_size=C, intermediate_size=I, num_hidden_layers=L,
            num_attention_heads=NH, num_key_value_heads=KV, max_position_embeddings=max_T,
            rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=False,
            attention_bias=False, mlp_bias=False, hidden_act="silu", use_cache=False,
            attention_dropout=0.0, initializer_range=0.02)
        config._attn_implementation = "sdpa"
        self.model = LlamaForCausalLM(config).float()
        self.model.train()
        init_llama(self.model, L)

    def forward(self, idx):
        return self.model(input_ids=idx, use_cache=False).logits


class CausalLM(nn.Module):
    """A model returning logits [B, T, V], with the loss as troupe's: the mean cross-entropy of
    logits[b, t] against targets[b, t] (no label shift)."""

    def __init__(self, model):
        super().__init__()
        self.inner = model

    def forward(self, idx, targets):
        logits = self.inner(idx)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def run_config(name, L, C, NH, V, T, B, args, KV=None, I=None):
    torch.manual_seed(1337)
    if KV is None:
        model = GPT(L, C, NH, V, T)
    elif args.llama_impl_resolved == "transformers":
        model = CausalLM(HFLlama(args.hf, L, C, NH, KV, I, V, T))
    else:
        model = CausalLM(PlainLlama(L, C, NH, KV, I, V, T))
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
    p.add_argument("--llama-config", action="append", default=[],
                   help="NAME:L:C:NH:KV:I:V:T:B (may repeat)")
    p.add_argument("--llama-impl", choices=("auto", "transformers", "plain"), default="auto",
                   help="the Llama model: transformers' LlamaForCausalLM or the plain one here")
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
    if args.llama_config:
        args.hf = transformers_llama() if args.llama_impl != "plain" else None
        if args.llama_impl == "transformers" and args.hf is None:
            raise RuntimeError("--llama-impl transformers: transformers does not import")
        if args.hf is not None:
            args.llama_impl_resolved = "transformers"
            result["llama"] = (f"transformers {args.hf[2]} LlamaForCausalLM "
                               "(attn_implementation sdpa)")
        else:
            args.llama_impl_resolved = "plain"
            result["llama"] = ("plain PyTorch (scaled_dot_product_attention, "
                               "repeat_interleave for the key/value heads)")
        print(f"torch: Llama model: {result['llama']}", file=sys.stderr, flush=True)
    for spec in args.llama_config:
        name, *dims = spec.split(":")
        L, C, NH, KV, I, V, T, B = (int(d) for d in dims)
        result.update(run_config(name, L, C, NH, V, T, B, args, KV=KV, I=I))
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
