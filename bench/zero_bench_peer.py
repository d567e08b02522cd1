#!/usr/bin/env python3
"""PyTorch's side of zero_bench: the GPT trained with DeepSpeed's ZeRO or PyTorch's FSDP2 over gloo.

    zero_bench_peer.py --framework deepspeed|fsdp2 --config PATH [--stage K] [--ranks N]
                       [--threads K] [--steps S] [--warmup W] [--timeout SECONDS]
                       [--parent-pid PID] [--ds-optimizer torch|default]

PATH is a troupe training config (examples/configs/*.json, docs/config.md): a DeepSpeed JSON
plus troupe's sections "model" (n_layer, n_head, n_embd, seq_len, vocab_size,
padded_vocab_size), "data", "parallel" and "training" (seed). The model is ddp_bench_torch.py's
GPT (tied LM head, pre-LN, tanh GELU), imported from it, with padded_vocab_size embedding rows
(absent or 0: vocab_size rounded up to 64) and tokens below vocab_size; its weights come from
torch.manual_seed(training.seed) on every rank. The batch keys are resolved as DeepSpeed does
(two of train_batch_size, train_micro_batch_size_per_gpu, gradient_accumulation_steps, with
parallel.dp), then train_batch_size = micro x accumulation x N for N ranks.

Data: micro-batch m of optimizer step s on rank r is B x (T + 1) random tokens from
torch.Generator().manual_seed(seed * 1000003 + (s * GA + m) * N + r): inputs the first T,
targets the last T. The loss of a step is the mean of its micro-batches' losses, then of the
ranks'.

N ranks (torch.multiprocessing, spawn), torch.distributed over gloo on 127.0.0.1 (a free port),
torch.set_num_threads(K) in each. W warm-up optimizer steps, a barrier, S timed steps of GA
micro-batches each:
  deepspeed: DS_ACCELERATOR=cpu; deepspeed.initialize(model, param groups, config = the JSON
    less troupe's sections, zero_optimization.stage = --stage if given); per micro-batch
    loss = engine(x, y); engine.backward(loss); engine.step(). The optimizer is the JSON's,
    built by DeepSpeed. DeepSpeed picks its own FusedAdam for Adam/AdamW without offload, on
    the CPU accelerator a C++ op that it compiles at first use (torch.utils.cpp_extension,
    about a minute, cached under ~/.cache/torch_extensions); --ds-optimizer torch (the default)
    sets the optimizer's "torch_adam": true, so DeepSpeed builds torch.optim.AdamW, as FSDP2's
    side uses; --ds-optimizer default keeps DeepSpeed's pick. ZeRO-3: wte's and wpe's weights,
    read outside their modules' forward, are registered as the root's external parameters.
  fsdp2: fully_shard (torch.distributed.fsdp) on every block, then the root, over a 1-D CPU
    mesh, fp32 (no mixed precision), reshard_after_forward=True (stage 3; --stage 2: False,
    FSDP2's nearest to ZeRO-2); gradients reduce-scattered after every micro-batch (as ZeRO-2/3
    do); torch.optim.AdamW (or SGD) with the JSON's params after sharding, loss / GA per
    micro-batch, clip_grad_norm_ when gradient_clipping > 0. The JSON's scheduler is not applied
    (a constant lr; DeepSpeed does apply it): the result's "scheduler" says so.
Both: weight decay on the 2-D tensors only, 0 on the 1-D ones (biases, LayerNorm), as troupe's
trainer does. gradient_clipping: the JSON's; absent, 0 (none) on both sides, where DeepSpeed's
own default would be 1.0 (a line on stderr says which).

Measured: each timed step on every rank (perf_counter, the GA micro-batches and the optimizer
step); a step's time is the slowest rank's; step_ms_median the median over the S steps;
samples_per_s = micro x GA x N / that median. Peak RSS (peak_rss_bytes): the largest VmHWM of
/proc/self/status (ru_maxrss where /proc is missing) of each rank over its whole run, which
includes the full model each rank builds before sharding it and the framework's set-up copies;
peak_rss_timed_bytes: the peak over the timed steps alone (VmHWM restarted through
/proc/self/clear_refs after the warm-up; null where that cannot be written); rss_base_bytes:
VmRSS of each rank after its imports and the process group, before the model.

Communication: torch.distributed's collectives (all_reduce, all_gather_into_tensor,
reduce_scatter_tensor, broadcast, ... the module's functions, patched in each rank before
DeepSpeed or FSDP is imported; a collective that calls another counts once), counted over the
timed steps only, per rank and divided by S. Per call, in_bytes and out_bytes are the bytes of
this rank's input and output tensors, and payload the larger of the two: the whole buffer the
collective covers (all_reduce: its tensor; all_gather: the gathered output; reduce_scatter: the
unreduced input). comm_bytes_per_step is rank 0's payload per step; comm_detail has each op's
calls and bytes per step, and ring_send_bytes_per_step_estimate, what a ring algorithm would send
from one rank: 2(N-1)/N x payload for all_reduce, (N-1)/N for the gathers, scatters, all_to_all,
broadcast and reduce, the tensor for a send. Not counted: the functional collectives of DTensor
(FSDP2's clip_grad_norm_ all-reduces its norm, one scalar, that way) and anything DeepSpeed sends
without torch.distributed (nothing on gloo).

Stdout: exactly one line, "ZERO_PEER_RESULT " and a JSON object: framework, stage, ranks,
threads, samples_per_s, step_ms_median, step_ms, peak_rss_bytes_max, peak_rss_bytes (per rank),
peak_rss_timed_bytes, rss_base_bytes, losses (every step, warm-up ones first), warmup, steps,
comm_bytes_per_step, comm_detail, optimizer, optimizer_wrapper, gradient_clipping, precision
(deepspeed: the config's fp16 or bf16 if enabled, else fp32; fsdp2: fp32), scheduler,
micro_batch, gradient_accumulation_steps, params, cpu_s_per_step (CPU time of all ranks per timed
step), versions. The ranks' stdout goes to stderr, with the progress lines.

Exit codes: 0 done; 2 bad arguments or config; 3 this cannot run here (no torch, gloo or
deepspeed; the reason on stderr, no result line); 1 a failure (the reason on stderr).
"""

import argparse
import datetime
import functools
import inspect
import json
import math
import os
import platform
import resource
import statistics
import sys
import threading
import time
import traceback

SKIP = 3
NAME = "zero_bench_peer"
TROUPE_SECTIONS = ("model", "data", "parallel", "training")


def fail(message, code=1):
    print(f"{NAME}: {message}", file=sys.stderr, flush=True)
    sys.exit(code)


try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
except Exception as e:  # ImportError, or a broken install (missing shared libraries)
    fail(f"skipped: cannot import torch with {sys.executable}: {type(e).__name__}: {e}", SKIP)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ddp_bench_torch import GPT, free_port  # noqa: E402 (torch imports first: no skip there)
from peer_watchdog import exit_with_parent  # noqa: E402


# ---- the config ----------------------------------------------------------------------------

def load_config(args):
    """The run's settings from the troupe JSON and the command line; exits 2 on a bad one."""
    try:
        with open(args.config) as f:
            cfg = json.load(f)
    except (OSError, ValueError) as e:
        fail(f"cannot read config {args.config}: {e}", 2)
    if not isinstance(cfg, dict):
        fail(f"{args.config}: not a JSON object", 2)
    m = cfg.get("model") or {}
    L, NH, C = m.get("n_layer", 2), m.get("n_head", 4), m.get("n_embd", 64)
    T, V = m.get("seq_len", 64), m.get("vocab_size", 256)
    Vp = m.get("padded_vocab_size") or (V + 63) // 64 * 64
    if min(L, NH, C, T, V) < 1 or C % NH or Vp < V:
        fail(f"{args.config}: bad model {m}", 2)

    dp = (cfg.get("parallel") or {}).get("dp", 1) or 1
    tbs = cfg.get("train_batch_size")
    micro = cfg.get("train_micro_batch_size_per_gpu")
    ga = cfg.get("gradient_accumulation_steps")
    if micro is None and ga is None:
        micro, ga = (tbs // dp if tbs else 1), 1
    elif micro is None:
        micro = tbs // (ga * dp) if tbs else 1
    elif ga is None:
        ga = max(1, tbs // (micro * dp)) if tbs else 1
    if micro < 1 or ga < 1:
        fail(f"{args.config}: bad batch sizes (micro {micro}, accumulation {ga})", 2)

    ds = {k: v for k, v in cfg.items() if k not in TROUPE_SECTIONS}
    new_tbs = micro * ga * args.ranks
    if tbs is not None and tbs != new_tbs:
        print(f"{NAME}: train_batch_size {tbs} -> {new_tbs} (micro {micro} x accumulation {ga} "
              f"x {args.ranks} ranks)", file=sys.stderr)
    ds.update(train_batch_size=new_tbs, train_micro_batch_size_per_gpu=micro,
              gradient_accumulation_steps=ga)
    if "gradient_clipping" in cfg and cfg["gradient_clipping"] is not None:
        clip = float(cfg["gradient_clipping"])
        print(f"{NAME}: gradient_clipping {clip:g} (from the config)", file=sys.stderr)
    else:
        clip = 0.0
        print(f"{NAME}: gradient_clipping absent: 0 (none) on both sides, passed to DeepSpeed "
              f"explicitly (its default would be 1.0)", file=sys.stderr)
    ds["gradient_clipping"] = clip
    zero = dict(ds.get("zero_optimization") or {})
    if args.stage is not None:
        zero["stage"] = args.stage
    ds["zero_optimization"] = zero
    opt = ds.get("optimizer") or {"type": "AdamW", "params": {}}
    opt = {"type": opt.get("type", "AdamW"), "params": dict(opt.get("params") or {})}
    if opt["type"].lower() not in ("adam", "adamw", "sgd"):
        fail(f"{args.config}: optimizer {opt['type']}: only Adam, AdamW and SGD here", 2)
    if args.framework == "deepspeed" and args.ds_optimizer == "torch" \
            and opt["type"].lower() in ("adam", "adamw"):
        opt["params"]["torch_adam"] = True
    ds["optimizer"] = opt
    ds.setdefault("steps_per_print", 1 << 30)  # DeepSpeed's progress lines: none
    if args.framework == "fsdp2":
        stage = 3 if args.stage is None else args.stage
    else:
        stage = int(zero.get("stage", 0))
    seed = int((cfg.get("training") or {}).get("seed", 1234))
    precision = next((k for k in ("fp16", "bf16") if (cfg.get(k) or {}).get("enabled")), "fp32")
    if args.framework == "fsdp2" and precision != "fp32":
        print(f"{NAME}: {precision} enabled in the config; fsdp2 runs fp32", file=sys.stderr)
        precision = "fp32"
    return {"L": L, "NH": NH, "C": C, "T": T, "V": V, "Vp": Vp, "micro": micro, "ga": ga,
            "clip": clip, "stage": stage, "seed": seed, "precision": precision, "ds": ds,
            "optimizer": opt,
            "scheduler": cfg.get("scheduler")}


# ---- communication counting ----------------------------------------------------------------

COLLECTIVES = (
    "all_reduce", "all_reduce_coalesced", "broadcast", "reduce", "all_gather",
    "all_gather_into_tensor", "_all_gather_base", "all_gather_single", "all_gather_coalesced",
    "reduce_scatter", "reduce_scatter_tensor", "_reduce_scatter_base", "reduce_scatter_single",
    "all_to_all", "all_to_all_single", "gather", "scatter", "send", "recv", "isend", "irecv",
    "batch_isend_irecv", "barrier", "monitored_barrier")
INPUT_NAMES = {"tensor", "tensors", "input", "input_tensor", "input_tensor_list", "input_list",
               "input_tensors", "scatter_list", "p2p_op_list"}
OUTPUT_NAMES = {"output", "output_tensor", "tensor_list", "output_tensor_list",
                "output_tensor_lists", "output_list", "output_tensors", "gather_list"}
ALLREDUCE_LIKE = {"all_reduce", "all_reduce_coalesced"}
POINT_TO_POINT_SEND = {"send", "isend", "batch_isend_irecv"}
POINT_TO_POINT_RECV = {"recv", "irecv"}


def tensor_bytes(x):
    if isinstance(x, torch.Tensor):
        return x.numel() * x.element_size()
    if isinstance(x, (list, tuple)):
        return sum(tensor_bytes(t) for t in x)
    if hasattr(x, "tensor") and isinstance(getattr(x, "tensor"), torch.Tensor):  # dist.P2POp
        return tensor_bytes(x.tensor)
    return 0


class CommCounter:
    """Wraps torch.distributed's collectives; counts while `on`, the outermost call only."""

    def __init__(self):
        self.on = False
        self.ops = {}
        self.local = threading.local()
        self.wrapped = {}

    def install(self):
        from torch.distributed import distributed_c10d as c10d
        for name in COLLECTIVES:
            orig = getattr(c10d, name, None) or getattr(dist, name, None)
            if orig is None:
                continue
            wrapper = self.wrap(name, orig)
            for module in (c10d, dist):
                if getattr(module, name, None) is orig:
                    setattr(module, name, wrapper)

    def wrap(self, name, orig):
        try:
            signature = inspect.signature(orig)
        except (TypeError, ValueError):
            signature = None

        @functools.wraps(orig)
        def wrapper(*args, **kwargs):
            depth = getattr(self.local, "depth", 0)
            if self.on and depth == 0:
                self.count(name, signature, args, kwargs)
            self.local.depth = depth + 1
            try:
                return orig(*args, **kwargs)
            finally:
                self.local.depth = depth

        return wrapper

    def count(self, name, signature, args, kwargs):
        in_b = out_b = 0
        try:
            bound = signature.bind(*args, **kwargs).arguments if signature else {}
        except TypeError:
            bound = {}
        for key, value in bound.items():
            if key in INPUT_NAMES:
                in_b += tensor_bytes(value)
            elif key in OUTPUT_NAMES:
                out_b += tensor_bytes(value)
        s = self.ops.setdefault(name, {"calls": 0, "in_bytes": 0, "out_bytes": 0,
                                       "payload_bytes": 0})
        s["calls"] += 1
        s["in_bytes"] += in_b
        s["out_bytes"] += out_b
        s["payload_bytes"] += max(in_b, out_b)

    def per_step(self, steps, world):
        ops, payload, ring = {}, 0, 0.0
        for name, s in sorted(self.ops.items()):
            ops[name] = {k: v / steps for k, v in s.items()}
            p = s["payload_bytes"] / steps
            payload += p
            if name in ALLREDUCE_LIKE:
                ring += 2 * (world - 1) / world * p
            elif name in POINT_TO_POINT_SEND:
                ring += p
            elif name not in POINT_TO_POINT_RECV:
                ring += (world - 1) / world * p
        return payload, ring, ops


# ---- a rank --------------------------------------------------------------------------------

def rss_bytes(key):
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def reset_peak_rss():
    """Restarts VmHWM from the current RSS (Linux >= 4.0); False where it cannot."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def batch(cfg, step, micro, rank, world):
    gen = torch.Generator().manual_seed(
        cfg["seed"] * 1000003 + (step * cfg["ga"] + micro) * world + rank)
    tokens = torch.randint(0, cfg["V"], (cfg["micro"], cfg["T"] + 1), generator=gen)
    return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()


def param_groups(model, weight_decay):
    params = [p for p in model.parameters() if p.requires_grad]
    return [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]


def torch_optimizer(groups, opt):
    p = opt["params"]
    if opt["type"].lower() == "sgd":
        keys = ("lr", "momentum", "dampening", "nesterov")
        return torch.optim.SGD(groups, **{k: p[k] for k in keys if k in p})
    keys = ("lr", "betas", "eps")
    return torch.optim.AdamW(groups, **{k: (tuple(p[k]) if k == "betas" else p[k])
                                        for k in keys if k in p})


def class_name(obj):
    cls = type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"


def build_deepspeed(args, cfg, model, world):
    import deepspeed
    import logging
    deepspeed.utils.logger.setLevel(logging.WARNING)
    wd = cfg["optimizer"]["params"].get("weight_decay", 0.0)
    if cfg["stage"] == 3:
        deepspeed.zero.register_external_parameter(model, model.wte.weight)
        deepspeed.zero.register_external_parameter(model, model.wpe.weight)
    engine, optimizer, _, scheduler = deepspeed.initialize(
        model=model, model_parameters=param_groups(model, wd), config=cfg["ds"],
        dist_init_required=False)
    basic = getattr(engine, "basic_optimizer", None) or getattr(optimizer, "optimizer", optimizer)

    def step(step_index, rank):
        losses = []
        for m in range(cfg["ga"]):
            x, y = batch(cfg, step_index, m, rank, world)
            loss = engine(x, y)
            engine.backward(loss)
            engine.step()
            losses.append(loss.item())
        return sum(losses) / len(losses)

    info = {"optimizer": class_name(basic), "optimizer_wrapper": class_name(optimizer),
            "scheduler": (f"{cfg['scheduler'].get('type')} (DeepSpeed's)"
                          if cfg["scheduler"] and scheduler is not None else "none"),
            "deepspeed": deepspeed.__version__}
    return step, info


def build_fsdp2(args, cfg, model, world):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    if cfg["stage"] not in (2, 3):
        raise ValueError(f"fsdp2: --stage {cfg['stage']}: only 3 (reshard after forward) or 2")
    mesh = init_device_mesh("cpu", (world,))
    reshard = cfg["stage"] == 3
    for block in model.blocks:
        fully_shard(block, mesh=mesh, reshard_after_forward=reshard)
    fully_shard(model, mesh=mesh, reshard_after_forward=reshard)
    wd = cfg["optimizer"]["params"].get("weight_decay", 0.0)
    optimizer = torch_optimizer(param_groups(model, wd), cfg["optimizer"])
    ga, clip = cfg["ga"], cfg["clip"]

    def step(step_index, rank):
        optimizer.zero_grad(set_to_none=True)
        losses = []
        for m in range(ga):
            x, y = batch(cfg, step_index, m, rank, world)
            loss = model(x, y)
            (loss / ga).backward()
            losses.append(loss.item())
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        return sum(losses) / len(losses)

    info = {"optimizer": class_name(optimizer), "optimizer_wrapper": None,
            "scheduler": (f"none: the config's {cfg['scheduler'].get('type')} is not applied "
                          f"(constant lr)" if cfg["scheduler"] else "none")}
    return step, info


def run_rank(rank, args, cfg, port, launcher_pid, queue):
    """One rank; rank 0 puts ("result", dict) on `queue`, a failing rank ("error", text)."""
    world = args.ranks
    try:
        os.dup2(2, 1)  # DeepSpeed logs to stdout: the parent's result line stays alone there
        sys.stdout = sys.stderr
        exit_with_parent(launcher_pid, f"{NAME} rank {rank}")
        os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world),
                          LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
                          MASTER_PORT=str(port))
        torch.set_num_threads(args.threads)
        counter = CommCounter()
        counter.install()  # before DeepSpeed or FSDP is imported, so they call the wrappers
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=world,
                                timeout=datetime.timedelta(seconds=args.timeout))
        if args.framework == "deepspeed":
            import deepspeed  # noqa: F401 (its import's memory counts in the base)
        rss_base = rss_bytes("VmRSS")
        torch.manual_seed(cfg["seed"])  # the same initial weights on every rank
        model = GPT(cfg["L"], cfg["C"], cfg["NH"], cfg["Vp"], cfg["T"])
        n_params = sum(p.numel() for p in model.parameters())
        build = build_deepspeed if args.framework == "deepspeed" else build_fsdp2
        step, info = build(args, cfg, model, world)
        torch.set_num_threads(args.threads)  # again, should the framework have changed it

        losses, times = [], []
        for s in range(args.warmup):
            losses.append(step(s, rank))
            print(f"{NAME} rank {rank}: warm-up step {s + 1}/{args.warmup} loss "
                  f"{losses[-1]:.4f}", file=sys.stderr, flush=True)
        dist.barrier()
        peak_setup = rss_bytes("VmHWM")
        peak_reset = reset_peak_rss()
        counter.on = True
        cpu_start = time.process_time()
        for s in range(args.warmup, args.warmup + args.steps):
            start = time.perf_counter()
            losses.append(step(s, rank))
            times.append(time.perf_counter() - start)
        cpu = time.process_time() - cpu_start
        counter.on = False
        if not all(math.isfinite(v) for v in losses):
            raise RuntimeError(f"a loss is not finite: {losses}")
        payload, ring, ops = counter.per_step(args.steps, world)
        peak_timed = rss_bytes("VmHWM")
        mine = {"times": times, "losses": losses, "peak": max(peak_setup, peak_timed),
                "timed_peak": peak_timed if peak_reset else None, "base": rss_base,
                "cpu": cpu, "payload": payload, "ring": ring, "ops": ops,
                "threads": torch.get_num_threads()}
        everyone = [None] * world
        dist.all_gather_object(everyone, mine)
        if rank == 0:
            step_s = [max(r["times"][i] for r in everyone) for i in range(args.steps)]
            median = statistics.median(step_s)
            peaks = [r["peak"] for r in everyone]
            versions = {"torch": torch.__version__, "python": platform.python_version()}
            if "deepspeed" in info:
                versions["deepspeed"] = info.pop("deepspeed")
            queue.put(("result", {
                "framework": args.framework,
                "stage": cfg["stage"],
                "ranks": world,
                "threads": everyone[0]["threads"],
                "samples_per_s": cfg["micro"] * cfg["ga"] * world / median,
                "step_ms_median": median * 1e3,
                "step_ms": [t * 1e3 for t in step_s],
                "peak_rss_bytes_max": max(peaks),
                "peak_rss_bytes": peaks,
                "peak_rss_timed_bytes": [r["timed_peak"] for r in everyone],
                "rss_base_bytes": [r["base"] for r in everyone],
                "losses": [statistics.fmean(r["losses"][i] for r in everyone)
                           for i in range(args.warmup + args.steps)],
                "warmup": args.warmup,
                "steps": args.steps,
                "comm_bytes_per_step": payload,
                "comm_detail": {
                    "counted": "torch.distributed collectives over the timed steps, rank 0, "
                               "per step; payload = max(this rank's input bytes, output "
                               "bytes) per call",
                    "ops": ops,
                    "payload_bytes_per_step_per_rank": [r["payload"] for r in everyone],
                    "ring_send_bytes_per_step_estimate": ring,
                    "not_counted": "DTensor functional collectives (FSDP2 clip_grad_norm_'s "
                                   "norm); the untimed steps",
                },
                **info,
                "gradient_clipping": cfg["clip"],
                "precision": cfg["precision"],
                "micro_batch": cfg["micro"],
                "gradient_accumulation_steps": cfg["ga"],
                "params": n_params,
                "cpu_s_per_step": sum(r["cpu"] for r in everyone) / args.steps,
                "versions": versions,
            }))
        dist.barrier()
        dist.destroy_process_group()
    except BaseException as e:
        queue.put(("error", f"rank {rank}: {type(e).__name__}: {e}\n{traceback.format_exc()}"))
        raise


# ---- the launcher --------------------------------------------------------------------------

def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--framework", choices=("deepspeed", "fsdp2"), required=True)
    p.add_argument("--config", required=True, help="a troupe training JSON")
    p.add_argument("--stage", type=int, choices=(0, 1, 2, 3),
                   help="overrides zero_optimization.stage (fsdp2: 3, the default, or 2)")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads per rank")
    p.add_argument("--steps", type=int, default=10, help="timed optimizer steps")
    p.add_argument("--warmup", type=int, default=2, help="optimizer steps before them")
    p.add_argument("--timeout", type=float, default=600.0,
                   help="seconds for the whole run (and gloo's rendezvous and operations)")
    p.add_argument("--parent-pid", type=int, default=0,
                   help="exit, with the ranks, when this process has exited")
    p.add_argument("--ds-optimizer", choices=("torch", "default"), default="torch",
                   help="torch: torch.optim.AdamW through DeepSpeed's torch_adam; default: "
                        "DeepSpeed's pick (FusedAdam, compiled at first use on the CPU)")
    args = p.parse_args()
    if args.ranks < 1 or args.ranks > 64 or args.threads < 1 or args.steps < 1 \
            or args.warmup < 0 or args.timeout <= 0:
        fail(f"bad arguments {sys.argv[1:]}", 2)
    if args.framework == "fsdp2" and args.stage not in (None, 2, 3):
        fail(f"fsdp2: --stage {args.stage}: only 3 (the default) or 2", 2)
    cfg = load_config(args)
    if not dist.is_available() or not dist.is_gloo_available():
        fail(f"skipped: torch {torch.__version__} has no torch.distributed with gloo", SKIP)
    if args.framework == "deepspeed":
        os.environ["DS_ACCELERATOR"] = "cpu"
        import importlib.util
        if importlib.util.find_spec("deepspeed") is None:
            fail(f"skipped: no deepspeed for {sys.executable}", SKIP)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)

    deadline = time.monotonic() + args.timeout
    children = []  # the ranks, for the watchdog (filled in once spawned)
    exit_with_parent(args.parent_pid, NAME, children)
    ctx = mp.get_context("spawn")
    q = ctx.SimpleQueue()
    procs = mp.spawn(run_rank, args=(args, cfg, free_port(), os.getpid(), q),
                     nprocs=args.ranks, join=False)
    children.extend(procs.processes)
    messages = []
    try:
        while not procs.join(timeout=1):
            while not q.empty():
                messages.append(q.get())
            if any(kind == "error" for kind, _ in messages):
                raise RuntimeError("a rank failed")
            if time.monotonic() > deadline:
                raise TimeoutError(f"no result within {args.timeout:.0f} s")
    except Exception as e:
        for proc in procs.processes:
            if proc.is_alive():
                proc.kill()
        for proc in procs.processes:
            proc.join(timeout=10)
        while not q.empty():
            messages.append(q.get())
        errors = [text for kind, text in messages if kind == "error"]
        fail(f"failed: {errors[0] if errors else f'{type(e).__name__}: {e}'}")
    while not q.empty():
        messages.append(q.get())
    results = [r for kind, r in messages if kind == "result"]
    if not results:
        fail("failed: no result from rank 0")
    r = results[0]
    comm = r["comm_bytes_per_step"]
    print(f"{NAME}: {r['framework']} stage {r['stage']}, {r['ranks']} ranks x {r['threads']} "
          f"threads: {r['step_ms_median']:.1f} ms/step, {r['samples_per_s']:.1f} samples/s, "
          f"peak RSS {r['peak_rss_bytes_max'] / 2**20:.0f} MiB, comm "
          f"{comm / 2**20:.2f} MiB/step, loss {r['losses'][0]:.4f} -> {r['losses'][-1]:.4f}, "
          f"optimizer {r['optimizer']}, load {os.getloadavg()[0]:.1f}",
          file=sys.stderr, flush=True)
    print("ZERO_PEER_RESULT " + json.dumps(r), flush=True)


if __name__ == "__main__":
    main()
