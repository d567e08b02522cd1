#!/usr/bin/env python3
"""PyTorch's side of ddp_bench: GPT training with DistributedDataParallel over gloo.

    ddp_bench_torch.py --dp N --threads T --steps S --warmup W
                       --config NAME:L:C:NH:V:T:B --bucket-cap-mb MB [--timeout SECONDS]
                       [--parent-pid PID]

The model is gpt_bench_torch.py's (tests/reference/gpt_reference.py's GPT-2: tied LM head,
pre-LN blocks, tanh GELU, causal attention through F.scaled_dot_product_attention where torch
has it, else masked softmax), copied here so that this file does not move with that one's
edits. torch.optim.AdamW(lr 1e-4, betas (0.9, 0.95), eps 1e-8, weight decay 0.1 on 2-D tensors,
0 on 1-D ones), random tokens, B samples of T tokens per replica and step.

dp = 1: one process, the plain model (troupe forms no group for one replica either).
dp > 1: dp processes (torch.multiprocessing, spawn), torch.distributed over gloo on
127.0.0.1 (a free port), DistributedDataParallel(model, bucket_cap_mb=MB). DDP rebuilds its
buckets in the order the gradients became ready during its first step, so W >= 2 for the timed
steps to run with the final buckets. Each process runs
torch.set_num_threads(T). W warm-up steps, a barrier, then S timed steps

    optimizer.zero_grad(); loss = ddp(x, y); loss.backward(); optimizer.step()

each timed on every rank (perf_counter); a step's time is the slowest rank's, the figure the
median over the S steps. For dp > 1 two references follow, to estimate how much of the
allreduce DDP hides behind backward: S steps under ddp.no_sync() (no allreduce: compute
alone), and the gradients' allreduce alone (async_op allreduces of a buffer cut as DDP's buckets,
else in pieces of MB, issued together then waited; median of S).
exposed = step - no_sync step; hidden = 1 - exposed / allreduce alone. With torch >= 2.1, also
the tail: every parameter gets a post-accumulate-grad hook; per step, the time from the last
gradient of the rank whose last gradient came last to the end of its backward() (where DDP
waits for its allreduces), median over the steps.

The last line of stdout is one JSON object: torch_version, attention, dp, threads, params,
step_s, samples_per_s, tokens_per_s, loss_first, loss_last, cpu_share (CPU time of all ranks /
(wall time x dp x threads) over the timed steps; well below 1: other processes had the cores),
cpu_s_per_step (CPU time of all ranks per timed step),
and for dp > 1 nosync_step_s, comm_alone_s, num_buckets, tail_s (torch >= 2.1). Progress goes to
stderr.

Exit codes: 0 done; 3 the peer cannot run here (no torch, no gloo): the JSON has "skipped" with
the reason; anything else: a failure (the reason on stderr).
"""

import argparse
import datetime
import json
import math
import os
import socket
import statistics
import sys
import time

from peer_watchdog import exit_with_parent

SKIP = 3


def skip(reason):
    print(f"ddp_bench_torch: {reason}", file=sys.stderr, flush=True)
    print(json.dumps({"skipped": reason}), flush=True)
    sys.exit(SKIP)


try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel
except Exception as e:  # ImportError, or a broken install (missing shared libraries)
    skip(f"cannot import torch with {sys.executable}: {type(e).__name__}: {e}")

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
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() < 2:
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


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_rank(rank, args, dims, port, queue):
    """One replica; rank 0 puts the result (or an error string) on `queue`."""
    name, L, C, NH, V, T, B = dims
    dp = args.dp
    try:
        torch.set_num_threads(args.threads)
        if dp > 1:
            dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                    world_size=dp,
                                    timeout=datetime.timedelta(seconds=args.timeout))
        torch.manual_seed(1337)  # the same initial weights on every rank, as DDP expects
        model = GPT(L, C, NH, V, T)
        params = list(model.parameters())
        n_params = sum(p.numel() for p in params)
        net = model
        if dp > 1:
            net = DistributedDataParallel(model, bucket_cap_mb=args.bucket_cap_mb)
        groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
                  {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
        optimizer = torch.optim.AdamW(groups, lr=1e-4, betas=(0.9, 0.95), eps=1e-8)
        gen = torch.Generator().manual_seed(1 + rank)  # each replica its own samples
        x = torch.randint(0, V, (B, T), generator=gen)
        y = torch.randint(0, V, (B, T), generator=gen)

        # When the last gradient of a step is accumulated (torch >= 2.1): from then until
        # backward() returns, DDP only finishes its allreduces.
        last_grad = [0.0]
        if dp > 1 and hasattr(params[0], "register_post_accumulate_grad_hook"):
            def mark(_):
                last_grad[0] = time.perf_counter()
            for p in params:
                p.register_post_accumulate_grad_hook(mark)
        phases = []  # per timed step: (start to last gradient, last gradient to backward's end)

        def step():
            start = time.perf_counter()
            optimizer.zero_grad()
            loss = net(x, y)
            loss.backward()
            backward_end = time.perf_counter()
            if last_grad[0] > start:
                phases.append((last_grad[0] - start, backward_end - last_grad[0]))
            optimizer.step()
            return time.perf_counter() - start, loss.item()

        losses = []
        for _ in range(args.warmup):
            losses.append(step()[1])
        if dp > 1:
            dist.barrier()
        times = []
        phases.clear()
        cpu_start = time.process_time()
        wall_start = time.perf_counter()
        for _ in range(args.steps):
            seconds, loss = step()
            times.append(seconds)
            losses.append(loss)
        wall = time.perf_counter() - wall_start
        cpu = time.process_time() - cpu_start
        timed_phases = list(phases)
        if not all(math.isfinite(v) for v in losses):
            raise RuntimeError(f"{name}: a loss is not finite: {losses}")

        nosync_times, comm_times, num_buckets = [], [], 0
        if dp > 1:
            dist.barrier()
            with net.no_sync():
                for _ in range(args.steps):
                    nosync_times.append(step()[0])
            dist.barrier()
            # The allreduce alone: DDP's buckets (as rebuilt after its first step, in the order
            # the gradients became ready) where its logging data has them, else chunks of
            # bucket_cap_mb; all issued, then waited.
            sizes = []
            try:
                rebuilt = net._get_ddp_logging_data().get("rebuilt_bucket_sizes", "")
                sizes = [int(b) // 4 for b in str(rebuilt).split(",") if b.strip()]
            except Exception:  # a private API: it may change
                sizes = []
            if sum(sizes) != n_params:
                cap = max(1, int(args.bucket_cap_mb * 1024 * 1024 / 4))
                sizes = [min(cap, n_params - i) for i in range(0, n_params, cap)]
            flat = torch.zeros(n_params)
            chunks = list(torch.split(flat, sizes))
            num_buckets = len(chunks)
            for r in range(args.steps + 1):
                dist.barrier()
                start = time.perf_counter()
                works = [dist.all_reduce(c, async_op=True) for c in chunks]
                for w in works:
                    w.wait()
                if r > 0:  # the first warms up the connections
                    comm_times.append(time.perf_counter() - start)

        mine = {"times": times, "nosync": nosync_times, "comm": comm_times, "cpu": cpu,
                "phases": timed_phases if len(timed_phases) == len(times) else [],
                "wall": wall, "losses": losses}
        if dp > 1:
            everyone = [None] * dp
            dist.all_gather_object(everyone, mine)
        else:
            everyone = [mine]
        if rank == 0:
            def slowest(key):
                return [max(r[key][i] for r in everyone) for i in range(len(everyone[0][key]))]

            step_s = statistics.median(slowest("times"))
            result = {
                "torch_version": torch.__version__,
                "attention": "scaled_dot_product_attention" if HAVE_SDPA else "masked softmax",
                "dp": dp,
                "threads": torch.get_num_threads(),
                "params": n_params,
                "step_s": step_s,
                "samples_per_s": dp * B / step_s,
                "tokens_per_s": dp * B * T / step_s,
                "loss_first": losses[0],
                "loss_last": losses[-1],
                "cpu_share": sum(r["cpu"] for r in everyone) /
                             (max(r["wall"] for r in everyone) * dp * args.threads),
                "cpu_s_per_step": sum(r["cpu"] for r in everyone) / args.steps,
            }
            if dp > 1:
                result["nosync_step_s"] = statistics.median(slowest("nosync"))
                result["comm_alone_s"] = statistics.median(slowest("comm"))
                result["num_buckets"] = num_buckets
                if all(r["phases"] for r in everyone):
                    # Per step, the rank whose last gradient came last: its wait for DDP.
                    tails = []
                    for i in range(len(times)):
                        last = max(everyone, key=lambda r: r["phases"][i][0])
                        tails.append(last["phases"][i][1])
                    result["tail_s"] = statistics.median(tails)
            queue.put(result)
        if dp > 1:
            dist.barrier()
            dist.destroy_process_group()
    except Exception as e:  # reported by the parent; the other ranks time out on the barrier
        if rank == 0 or dp == 1:
            queue.put(f"rank {rank}: {type(e).__name__}: {e}")
        raise


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dp", type=int, required=True)
    p.add_argument("--threads", type=int, required=True)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--config", required=True, help="NAME:L:C:NH:V:T:B")
    p.add_argument("--bucket-cap-mb", type=float, default=25.0)
    p.add_argument("--timeout", type=float, default=600.0,
                   help="seconds for the whole run (and gloo's rendezvous and operations)")
    p.add_argument("--parent-pid", type=int, default=0,
                   help="exit, with the ranks, when this process has exited")
    args = p.parse_args()
    name, *rest = args.config.split(":")
    dims = (name, *(int(d) for d in rest))
    if len(dims) != 7 or args.dp < 1 or args.threads < 1 or args.steps < 1 or args.warmup < 0:
        print(f"ddp_bench_torch: bad arguments {sys.argv[1:]}", file=sys.stderr)
        sys.exit(2)
    if args.dp > 1 and not dist.is_available():
        skip(f"torch {torch.__version__} was built without torch.distributed")
    if args.dp > 1 and not dist.is_gloo_available():
        skip(f"torch {torch.__version__} was built without the gloo backend")

    deadline = time.monotonic() + args.timeout
    children = []  # the ranks, for the watchdog (filled in once spawned)
    exit_with_parent(args.parent_pid, "ddp_bench_torch", children)
    if args.dp == 1:
        import queue as queue_module
        q = queue_module.SimpleQueue()
        try:
            run_rank(0, args, dims, 0, q)
        except Exception:
            pass  # its reason is on the queue
        result = q.get() if not q.empty() else "no result"

    else:
        ctx = mp.get_context("spawn")
        q = ctx.SimpleQueue()
        procs = mp.spawn(run_rank, args=(args, dims, free_port(), q), nprocs=args.dp,
                         join=False)
        children.extend(procs.processes)
        try:
            while not procs.join(timeout=2):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no result within {args.timeout:.0f} s")
        except Exception as e:
            for proc in procs.processes:
                if proc.is_alive():
                    proc.kill()
            for proc in procs.processes:
                proc.join(timeout=10)
            reason = q.get() if not q.empty() else f"{type(e).__name__}: {e}"
            print(f"ddp_bench_torch: failed: {reason}", file=sys.stderr, flush=True)
            sys.exit(1)
        if q.empty():
            print("ddp_bench_torch: failed: no result from rank 0", file=sys.stderr, flush=True)
            sys.exit(1)
        result = q.get()
    if isinstance(result, str):
        print(f"ddp_bench_torch: failed: {result}", file=sys.stderr, flush=True)
        sys.exit(1)
    extra = ""
    if args.dp > 1:
        extra = (f", no_sync {result['nosync_step_s'] * 1e3:.1f} ms, allreduce alone "
                 f"{result['comm_alone_s'] * 1e3:.1f} ms in {result['num_buckets']} buckets")
        if "tail_s" in result:
            extra += f", last rank's wait after its last gradient {result['tail_s'] * 1e3:.1f} ms"
    print(f"torch: {name} dp {args.dp}: {result['step_s'] * 1e3:.1f} ms/step, "
          f"{result['samples_per_s']:.1f} samples/s, {result['tokens_per_s']:.0f} tokens/s, loss {result['loss_first']:.4f} -> "
          f"{result['loss_last']:.4f}, cpu {result['cpu_share']:.0%}{extra}, "
          f"load {os.getloadavg()[0]:.1f}", file=sys.stderr, flush=True)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
