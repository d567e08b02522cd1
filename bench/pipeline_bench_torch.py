#!/usr/bin/env python3
"""PyTorch's side of pipeline_bench: the GPT trained with torch.distributed.pipelining over gloo.

    pipeline_bench_torch.py --schedule gpipe|1f1b|interleaved --stages P --micro-batches M
                            --config L:C:NH:V:T:B [--threads K] [--steps S] [--warmup W]
                            [--timeout SECONDS] [--parent-pid PID]

The model is ddp_bench_torch.py's GPT (tied LM head, pre-LN blocks, tanh GELU), imported from
it, split as troupe splits it: stage s holds blocks [s L / P ...) evenly, the first L mod P
stages one more; the first stage also the embeddings, the last the final LayerNorm and the
head. torch.distributed.pipelining does not tie weights across stages, so the last stage's head
has its own copy of wte (the same values; the two copies' gradients are not summed, which
spares this side the exchange troupe makes).

P processes (torch.multiprocessing, spawn), torch.distributed over gloo on 127.0.0.1 (a free
port), torch.set_num_threads(K) in each; PipelineStage per rank, ScheduleGPipe or Schedule1F1B
(interleaved: 2 PipelineStages a rank, chunk c of rank r being stage c P + r of 2 P, split as
troupe splits its virtual stages, and ScheduleInterleaved1F1B) with M micro-batches of B samples of T random tokens (a batch of M x B a step), cross-entropy
as the schedule's loss, torch.optim.AdamW (lr 1e-4, betas (0.9, 0.95), weight decay 0.1 on 2-D
tensors). W warm-up steps, a barrier, S timed steps of

    optimizer.zero_grad(); schedule.step(...); optimizer.step()

each timed on every rank (perf_counter); a step's time is the slowest rank's (an allreduce of
MAX), the figure the median over the S steps; samples_per_s = M x B / that median.

Prints one line "PIPELINE_PEER_RESULT {json}" with samples_per_s and step_ms_median. Exit
status 3, with a line saying why, when torch, torch.distributed.pipelining or gloo is missing.
"""

import argparse
import datetime
import json
import os
import socket
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_watchdog import exit_with_parent  # noqa: E402

SKIP = 3


def skip(reason):
    print(f"pipeline_bench_torch: {reason}", file=sys.stderr, flush=True)
    sys.exit(SKIP)


try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.distributed.pipelining import (PipelineStage, Schedule1F1B, ScheduleGPipe,
                                              ScheduleInterleaved1F1B)
except Exception as e:  # ImportError, or a broken install
    skip(f"cannot import torch.distributed.pipelining with {sys.executable}: "
         f"{type(e).__name__}: {e}")

from ddp_bench_torch import GPT  # noqa: E402  (after torch: it imports torch itself)


def block_range(L, P, s):
    base, extra = divmod(L, P)
    begin = s * base + min(s, extra)
    return begin, begin + base + (1 if s < extra else 0)


class Stage(nn.Module):
    """Stage s of P of `model`: the input is token ids on the first, activations after."""

    def __init__(self, model, s, P):
        super().__init__()
        L = len(model.blocks)
        begin, end = block_range(L, P, s)
        self.first, self.last = s == 0, s == P - 1
        self.blocks = nn.ModuleList(model.blocks[begin:end])
        if self.first:
            self.wte, self.wpe = model.wte, model.wpe
        if self.last:
            self.lnf = model.lnf
            self.head = nn.Parameter(model.wte.weight.detach().clone())  # the tied head's copy

    def forward(self, x):
        if self.first:
            x = self.wte(x) + self.wpe.weight[: x.shape[1]]
        for block in self.blocks:
            x = block(x)
        if self.last:
            x = F.linear(self.lnf(x), self.head)
        return x


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_rank(rank, args, dims, port, queue):
    L, C, NH, V, T, B = dims
    P, M = args.stages, args.micro_batches
    try:
        torch.set_num_threads(args.threads)
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=P, timeout=datetime.timedelta(seconds=args.timeout))
        torch.manual_seed(1337)
        model = GPT(L, C, NH, V, T)
        chunks = 2 if args.schedule == "interleaved" else 1
        modules = [Stage(model, c * P + rank, chunks * P) for c in range(chunks)]
        stages = [PipelineStage(m, c * P + rank, chunks * P, torch.device("cpu"))
                  for c, m in enumerate(modules)]

        def loss_fn(logits, targets):
            return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

        if args.schedule == "interleaved":
            schedule = ScheduleInterleaved1F1B(stages, n_microbatches=M, loss_fn=loss_fn)
        else:
            kind = ScheduleGPipe if args.schedule == "gpipe" else Schedule1F1B
            schedule = kind(stages[0], n_microbatches=M, loss_fn=loss_fn)
        params = [p for m in modules for p in m.parameters()]
        groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
                  {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
        optimizer = torch.optim.AdamW(groups, lr=1e-4, betas=(0.9, 0.95), eps=1e-8)
        gen = torch.Generator().manual_seed(7)
        x = torch.randint(0, V, (M * B, T), generator=gen)
        y = torch.randint(0, V, (M * B, T), generator=gen)

        def step():
            start = time.perf_counter()
            optimizer.zero_grad()
            if rank == 0:  # the first (virtual) stage
                schedule.step(x)
            elif rank == P - 1:  # the last
                schedule.step(target=y, losses=[])
            else:
                schedule.step()
            optimizer.step()
            return time.perf_counter() - start

        for _ in range(args.warmup):
            step()
        dist.barrier()
        times = torch.tensor([step() for _ in range(args.steps)], dtype=torch.float64)
        dist.all_reduce(times, op=dist.ReduceOp.MAX)  # a step's time: the slowest rank's
        if rank == 0:
            median_s = statistics.median(times.tolist())
            queue.put({"samples_per_s": M * B / median_s, "step_ms_median": 1e3 * median_s,
                       "torch": torch.__version__})
        dist.destroy_process_group()
    except Exception as e:
        if rank == 0:
            queue.put(f"rank {rank}: {type(e).__name__}: {e}")
        raise


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--schedule", choices=["gpipe", "1f1b", "interleaved"], required=True)
    p.add_argument("--stages", type=int, required=True)
    p.add_argument("--micro-batches", type=int, required=True)
    p.add_argument("--config", required=True, help="L:C:NH:V:T:B")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--timeout", type=float, default=600.0)
    p.add_argument("--parent-pid", type=int, default=0)
    args = p.parse_args()
    dims = tuple(int(d) for d in args.config.split(":"))
    if len(dims) != 6 or args.stages < 2 or args.stages > dims[0] or args.micro_batches < 1:
        print(f"pipeline_bench_torch: bad arguments {sys.argv[1:]}", file=sys.stderr)
        sys.exit(2)
    if not dist.is_gloo_available():
        skip(f"torch {torch.__version__} was built without the gloo backend")
    children = []
    exit_with_parent(args.parent_pid, "pipeline_bench_torch", children)
    ctx = mp.get_context("spawn")
    q = ctx.SimpleQueue()
    procs = mp.spawn(run_rank, args=(args, dims, free_port(), q), nprocs=args.stages, join=False)
    children.extend(procs.processes)
    deadline = time.monotonic() + args.timeout
    try:
        while not procs.join(timeout=2):
            if time.monotonic() > deadline:
                raise TimeoutError(f"no result within {args.timeout:.0f} s")
    except Exception as e:
        for proc in procs.processes:
            if proc.is_alive():
                proc.kill()
        result = q.get() if not q.empty() else f"{type(e).__name__}: {e}"
        print(f"pipeline_bench_torch: failed: {result}", file=sys.stderr, flush=True)
        sys.exit(1)
    result = q.get() if not q.empty() else "no result"
    if not isinstance(result, dict):
        print(f"pipeline_bench_torch: failed: {result}", file=sys.stderr, flush=True)
        sys.exit(1)
    print("PIPELINE_PEER_RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
