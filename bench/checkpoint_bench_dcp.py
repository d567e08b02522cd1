#!/usr/bin/env python3
"""PyTorch DCP's side of checkpoint_bench: torch.distributed.checkpoint saving and loading the
same model state troupe's ranks save, over gloo.

    checkpoint_bench_dcp.py --elements N --ranks R --dir DIR [--repeat K] [--parent-pid PID]
                            [--drop-caches]

Each of R ranks (torch.multiprocessing, spawn; gloo on 127.0.0.1) owns 1/R of a model of N
parameters (the last rank the remainder, as DeepSpeed's flat partition) and holds, as troupe's
ZeRO shards do, its part of the fp32 parameters and of AdamW's two moments: a state dict of
three float32 tensors under names of its own ("rank{r}.param", "rank{r}.exp_avg",
"rank{r}.exp_avg_sq"). K times: a barrier, dcp.save(state, checkpoint_id=DIR/save-k) (DCP's
FileSystemWriter, which fsyncs its files: sync_files defaults to True), a barrier; the time
of a save is rank 0's from the first barrier to the second. Then K loads into fresh tensors
(dcp.load) the same way, each checked equal to what was saved. --drop-caches: the page cache is
dropped before each load (root; where /proc/sys/vm/drop_caches cannot be written it says so).

Prints one JSON line: bytes (the state of all ranks), save_ms and load_ms (lists, K each),
torch's version.
"""

import argparse
import json
import os
import shutil
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_watchdog import exit_with_parent  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def drop_caches():
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def run_rank(rank, args, port, out):
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=args.ranks)
    part = (args.elements + args.ranks - 1) // args.ranks
    begin = min(args.elements, rank * part)
    end = min(args.elements, (rank + 1) * part)
    g = torch.Generator().manual_seed(rank)
    state = {f"rank{rank}.{k}": torch.randn(end - begin, generator=g)
             for k in ("param", "exp_avg", "exp_avg_sq")}
    save_ms, load_ms, dropped = [], [], None
    for k in range(args.repeat):
        path = os.path.join(args.dir, f"save-{k}")
        dist.barrier()
        t0 = time.perf_counter()
        dcp.save(state, checkpoint_id=path)
        dist.barrier()
        save_ms.append((time.perf_counter() - t0) * 1e3)
    for k in range(args.repeat):
        path = os.path.join(args.dir, f"save-{k}")
        fresh = {name: torch.empty_like(t) for name, t in state.items()}
        if args.drop_caches and rank == 0:
            dropped = drop_caches()
        dist.barrier()
        t0 = time.perf_counter()
        dcp.load(fresh, checkpoint_id=path)
        dist.barrier()
        load_ms.append((time.perf_counter() - t0) * 1e3)
        for name, t in state.items():
            if not torch.equal(fresh[name], t):
                raise RuntimeError(f"rank {rank}: {name} loaded differs")
    if rank == 0:
        out.put({"save_ms": save_ms, "load_ms": load_ms, "caches_dropped": dropped,
                 "torch": torch.__version__})
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--elements", type=int, required=True)
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--dir", required=True)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--parent-pid", type=int, default=0)
    p.add_argument("--drop-caches", action="store_true")
    args = p.parse_args()
    exit_with_parent(args.parent_pid, "checkpoint_bench_dcp")
    import torch.multiprocessing as mp
    shutil.rmtree(args.dir, ignore_errors=True)
    os.makedirs(args.dir)
    ctx = mp.get_context("spawn")
    q = ctx.SimpleQueue()
    mp.spawn(run_rank, args=(args, free_port(), q), nprocs=args.ranks, join=True)
    result = q.get()
    result["bytes"] = args.elements * 3 * 4
    shutil.rmtree(args.dir, ignore_errors=True)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
