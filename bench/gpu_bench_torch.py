#!/usr/bin/env python3
"""PyTorch's side of gpu_bench: the same GPT-2 training step on the same GPU, eager and compiled.

    gpu_bench_torch.py --config NAME [--config ...] --batch B --seq T --steps S --warmup W
                       --repeat R --dtype fp32|bf16

NAME is gpt2-124m (12 layers, 768 channels, 12 heads, vocabulary 50304: GPT-2's padded as llm.c
pads it), gpt2-tiny, llama-124m (12 layers, 768 channels, 12 query heads over 4 key/value heads,
an MLP of 2048, vocabulary 32000, untied head) or llama-tiny. The models are gpt_bench_torch.py's
GPT (tied head, pre-LN, tanh GELU, F.scaled_dot_product_attention) and PlainLlama (RMSNorm,
rotary, SwiGLU, grouped-query attention through F.scaled_dot_product_attention), on cuda:0, trained on a fixed random batch with
torch.optim.AdamW(lr 6e-4, betas (0.9, 0.95), eps 1e-8, weight decay 0.1 on the 2-D tensors,
fused=True) as PyTorch users train on a GPU. fp32: TF32 off (troupe's GEMMs are pedantic fp32);
bf16: torch.autocast(device_type="cuda", dtype=torch.bfloat16) with fp32 weights and optimizer
state. One step is zero_grad, loss = model(x, y), loss.backward(), optimizer.step(), then
torch.cuda.synchronize(); W warm-up steps (torch.compile compiles in them), then R repeats of S
steps; a repeat's figure is its median step, the config's the median over repeats. "eager" runs
the module as it is, "compile" torch.compile(model).

Prints one JSON object on the last line: torch_version, and per config and mode
"NAME.MODE.tokens_per_s" and "NAME.MODE.loss_last". Progress goes to stderr.
"""

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt_bench_torch import GPT, CausalLM, PlainLlama  # noqa: E402

import torch  # noqa: E402

CONFIGS = {"gpt2-124m": (12, 768, 12, 50304), "gpt2-tiny": (2, 64, 2, 256)}
# L, C, NH, KV, I, V
LLAMA_CONFIGS = {"llama-124m": (12, 768, 12, 4, 2048, 32000), "llama-tiny": (2, 64, 4, 2, 96, 256)}


def run(name, mode, args):
    torch.manual_seed(1234)
    if name in LLAMA_CONFIGS:
        L, C, NH, KV, I, V = LLAMA_CONFIGS[name]
        model = CausalLM(PlainLlama(L, C, NH, KV, I, V, args.seq)).cuda()
    else:
        L, C, NH, V = CONFIGS[name]
        model = GPT(L, C, NH, V, args.seq).cuda()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=6e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)
    step_model = torch.compile(model) if mode == "compile" else model
    g = torch.Generator(device="cpu").manual_seed(7)
    x = torch.randint(0, V, (args.batch, args.seq), generator=g).cuda()
    y = torch.randint(0, V, (args.batch, args.seq), generator=g).cuda()
    loss = None

    def step():
        nonlocal loss
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16,
                            enabled=args.dtype == "bf16"):
            loss = step_model(x, y)
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
        return time.perf_counter() - start

    for _ in range(args.warmup):
        step()
    repeats = [statistics.median(step() for _ in range(args.steps)) for _ in range(args.repeat)]
    tps = args.batch * args.seq / statistics.median(repeats)
    print(f"{name} {mode}: {tps:.0f} tokens/s", file=sys.stderr)
    return tps, float(loss)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--config", action="append", required=True)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--dtype", choices=["fp32", "bf16"], default="bf16")
    args = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    out = {"torch_version": torch.__version__}
    for name in args.config:
        for mode in ("eager", "compile"):
            try:
                tps, loss = run(name, mode, args)
            except Exception as e:  # a failed compile is reported, the other mode still runs
                print(f"{name} {mode}: failed: {e}", file=sys.stderr)
                continue
            out[f"{name}.{mode}.tokens_per_s"] = tps
            out[f"{name}.{mode}.loss_last"] = loss
    print(json.dumps(out))


if __name__ == "__main__":
    main()
