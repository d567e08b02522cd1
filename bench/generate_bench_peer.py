#!/usr/bin/env python3
"""transformers' side of generate_bench: greedy generation from the same exported model.

    generate_bench_peer.py --model DIR --prompt ID,ID,... --new-tokens N --threads T
                           --warmup W --repeat R [--parent-pid PID]

Loads DIR (config.json and model.safetensors as `troupe export` writes them) with
AutoModelForCausalLM.from_pretrained (fp32, eval mode), then times

    model.generate(input_ids, attention_mask=ones, do_sample=False, max_new_tokens=N,
                   use_cache=True)

under torch.inference_mode(), with time.perf_counter around the call: W warm-up calls, then R
timed ones; the figure is N / the median call time. No end-of-sequence token (eos_token_id,
bos_token_id and pad_token_id None in the generation config): every call makes N tokens, as
troupe's side does. torch.set_num_threads(T), as generate_bench's --threads.

Prints one JSON object on the last line of stdout: torch_version, transformers_version,
tokens_per_s, call_s (the median), ids (the N new tokens of the last call). Progress goes to
stderr.
"""

import argparse
import json
import statistics
import sys
import time

from peer_watchdog import exit_with_parent

import torch


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--prompt", required=True)
    p.add_argument("--new-tokens", type=int, required=True)
    p.add_argument("--threads", type=int, required=True)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--parent-pid", type=int, default=0,
                   help="exit when this process is gone (the bench that started us)")
    args = p.parse_args()
    exit_with_parent(args.parent_pid, "generate_bench_peer")
    torch.set_num_threads(args.threads)
    import transformers
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(args.model, torch_dtype=torch.float32)
    model.eval()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = None
    model.generation_config.bos_token_id = None
    ids = torch.tensor([[int(t) for t in args.prompt.split(",")]], dtype=torch.long)
    mask = torch.ones_like(ids)
    n = args.new_tokens

    def run():
        with torch.inference_mode():
            start = time.perf_counter()
            out = model.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=n,
                                 use_cache=True)
            return time.perf_counter() - start, out[0, ids.shape[1]:].tolist()

    for _ in range(args.warmup):
        run()
    times = []
    new_ids = []
    for r in range(args.repeat):
        t, new_ids = run()
        times.append(t)
        print(f"generate_bench_peer: repeat {r}: {n / t:.1f} tokens/s", file=sys.stderr)
    call_s = statistics.median(times)
    print(json.dumps({
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
        "tokens_per_s": n / call_s,
        "call_s": call_s,
        "ids": new_ids,
    }))


if __name__ == "__main__":
    main()
