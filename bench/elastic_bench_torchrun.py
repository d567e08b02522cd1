#!/usr/bin/env python3
"""torchelastic's side of elastic_bench: the same GPT trained with DDP under torchrun, started
on one node, and a second node joining while it trains.

    TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 \\
    python -m torch.distributed.run --nnodes=1:2 --nproc-per-node 1 --max-restarts 3 \\
        --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:PORT --rdzv-id ID \\
        [--rdzv-conf last_call_timeout=1] \\
        elastic_bench_torchrun.py --config L:C:NH:V:T:B --steps S --checkpoint-every N
                                  --dir DIR [--threads T] [--step-delay SECONDS]

started once as node A and, once A has completed a step, a second time (the same command) as
node B. torchrun's elastic rendezvous (1 to 2 nodes) runs A alone at world size 1; B's agent,
finding the round closed, waits for the next one; A's agent sees a node waiting, stops its
worker (SIGTERM, at whatever point of a step) and both agents start their workers again at
world size 2, which resume from the last checkpoint. torchrun counts a membership change as no
restart: TORCHELASTIC_RESTART_COUNT stays as it was, and --max-restarts is not spent. The two
nodes share DIR.

The rendezvous's round after the join needs TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 in both agents'
environment: with the TCPStore that the agents share with their workers, an agent keeps the
workers' store address of its first round, so that A, rank 0 again, publishes none for the
second; B's agent waits for it, A's for B's rank information, and both fail at the store's read
timeout (60 s). The rendezvous starts A alone only after last_call_timeout (30 s unless
--rdzv-conf sets it) without a second node; the round with B completes as soon as B is in it
(2 nodes, the maximum). A node B that arrives within A's last call joins the first round, and
the job starts at world size 2 without a restart.

As torchrun's users write it: each worker (RANK, gloo over the rendezvous) builds
ddp_bench_torch.py's GPT (tests/reference/gpt_reference.py's GPT-2) with AdamW(lr 1e-4,
betas (0.9, 0.95), eps 1e-8, weight decay 0.1 on 2-D tensors), loads DIR/checkpoint.pt if it
exists (model, optimizer, step) and trains steps from the one after it to S on random tokens
drawn per step and rank. The global batch stays B sequences of T tokens at any world size W:
each rank runs B / W of them per step (B not a multiple of W: exit 2), and DDP averages the
gradients. Rank 0 saves the checkpoint every N steps (torch.save to a temporary name, then
os.replace) between two barriers, and appends "STEP TIME WORLD ATTEMPT" to DIR/steps.log after
each step (TIME time.time(), WORLD the world size, ATTEMPT TORCHELASTIC_RESTART_COUNT), a line
at a time, so that the bench can read the time from B's start to the first step completed at
WORLD 2, and the steps run again: those completed at WORLD 1 whose STEP is at least the first
WORLD 2 step's (the steps completed after the last checkpoint; the one in flight at the
restart was not completed and is not among them). --step-delay: seconds each rank sleeps after
each step but the last (default 0), for a tiny model to run long enough for B to join. Exits 0
when step S is done; 2 on bad arguments; 3 when torch cannot be imported.
"""

import argparse
import datetime
import os
import sys
import time

try:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
except Exception as e:  # ImportError, or a broken install
    print(f"elastic_bench_torchrun: cannot import torch: {e}", file=sys.stderr, flush=True)
    sys.exit(3)

from ddp_bench_torch import GPT  # the model ddp_bench's PyTorch side trains


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--config", required=True)  # L:C:NH:V:T:B, B the global batch
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--checkpoint-every", type=int, default=20)
    p.add_argument("--dir", required=True)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--step-delay", type=float, default=0.0)
    args = p.parse_args()
    dims = args.config.split(":")
    if len(dims) != 6 or args.steps < 1 or args.checkpoint_every < 1 or args.step_delay < 0:
        print(f"elastic_bench_torchrun: bad arguments {sys.argv[1:]}", file=sys.stderr,
              flush=True)
        sys.exit(2)
    L, C, NH, V, T, B = (int(v) for v in dims)
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    if B % world != 0:
        print(f"elastic_bench_torchrun: the global batch {B} is not a multiple of the world "
              f"size {world}", file=sys.stderr, flush=True)
        sys.exit(2)
    local_batch = B // world
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    if dist.get_world_size() != world:
        raise RuntimeError(f"world size {dist.get_world_size()}, WORLD_SIZE {world}")
    torch.manual_seed(1337)
    model = GPT(L, C, NH, V, T)
    params = list(model.parameters())
    groups = [{"params": [q for q in params if q.dim() >= 2], "weight_decay": 0.1},
              {"params": [q for q in params if q.dim() < 2], "weight_decay": 0.0}]
    optimizer = torch.optim.AdamW(groups, lr=1e-4, betas=(0.9, 0.95), eps=1e-8)
    checkpoint = os.path.join(args.dir, "checkpoint.pt")
    first = 1
    if os.path.exists(checkpoint):
        state = torch.load(checkpoint, map_location="cpu")
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        first = state["step"] + 1
    net = DistributedDataParallel(model)
    if rank == 0:
        print(f"elastic_bench_torchrun: world {world} (attempt {attempt}), {local_batch} of "
              f"{B} sequences per rank, from step {first}", file=sys.stderr, flush=True)
    for step in range(first, args.steps + 1):
        gen = torch.Generator().manual_seed(step * 1000 + rank)
        x = torch.randint(0, V, (local_batch, T), generator=gen)
        y = torch.randint(0, V, (local_batch, T), generator=gen)
        optimizer.zero_grad()
        net(x, y).backward()
        optimizer.step()
        if step % args.checkpoint_every == 0:
            dist.barrier()
            if rank == 0:
                tmp = checkpoint + ".tmp"
                torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                            "step": step}, tmp)
                os.replace(tmp, checkpoint)
            dist.barrier()
        if rank == 0:
            with open(os.path.join(args.dir, "steps.log"), "a") as f:
                f.write(f"{step} {time.time()} {world} {attempt}\n")
                f.flush()
        if args.step_delay > 0 and step < args.steps:
            time.sleep(args.step_delay)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
