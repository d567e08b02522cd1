#!/usr/bin/env python3
"""torchelastic's side of chaos_bench: the same GPT trained with DDP under torchrun, a rank
SIGKILLed at a chosen step, and the job restarted from its last checkpoint.

    python -m torch.distributed.run --nproc-per-node 2 --max-restarts 1 \\
        --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:PORT \\
        chaos_bench_torchrun.py --config L:C:NH:V:T:B --steps S --kill-step K
                                --checkpoint-every N --dir DIR [--threads T]

As torchrun's users write it: each worker (RANK, gloo over the rendezvous) builds
ddp_bench_torch.py's GPT (tests/reference/gpt_reference.py's GPT-2) with AdamW(lr
1e-4, betas (0.9, 0.95), eps 1e-8, weight decay 0.1 on 2-D tensors), loads DIR/checkpoint.pt
if it exists (model, optimizer, step) and trains steps from the one after it to S on random
tokens drawn per step and rank; rank 0 saves the checkpoint every N steps (torch.save to a
temporary name, then os.replace) between two barriers. On the first attempt
(TORCHELASTIC_RESTART_COUNT 0) rank 1 writes the time to DIR/killed and SIGKILLs itself just
before step K's forward; torchrun sees the failure, stops the other worker and starts both
again, which resume from the checkpoint. Rank 0 appends "STEP TIME ATTEMPT" to DIR/steps.log
after each step (time.time()), so that the bench can read the time from the kill to the next
completed step and the steps recomputed. Exits 0 when step S is done.
"""

import argparse
import datetime
import os
import signal
import sys
import time

try:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
except Exception as e:  # ImportError, or a broken install
    print(f"chaos_bench_torchrun: cannot import torch: {e}", file=sys.stderr, flush=True)
    sys.exit(3)

from ddp_bench_torch import GPT  # the model ddp_bench's PyTorch side trains


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--config", required=True)  # L:C:NH:V:T:B
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--kill-step", type=int, required=True)
    p.add_argument("--checkpoint-every", type=int, default=20)
    p.add_argument("--dir", required=True)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    L, C, NH, V, T, B = (int(v) for v in args.config.split(":"))
    rank = int(os.environ["RANK"])
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
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
    for step in range(first, args.steps + 1):
        if step == args.kill_step and rank == 1 and attempt == 0:
            with open(os.path.join(args.dir, "killed"), "w") as f:
                f.write(f"{time.time()}\n")
            os.kill(os.getpid(), signal.SIGKILL)
        gen = torch.Generator().manual_seed(step * 1000 + rank)
        x = torch.randint(0, V, (B, T), generator=gen)
        y = torch.randint(0, V, (B, T), generator=gen)
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
                f.write(f"{step} {time.time()} {attempt}\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
