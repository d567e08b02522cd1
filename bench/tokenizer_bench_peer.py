#!/usr/bin/env python3
"""The Python tokenizers troupe's tokenizers are measured against: tiktoken's GPT-2 encoding and
sentencepiece, encoding the Shakespeare corpus of scripts/fetch_text.sh.

    tokenizer_bench_peer.py --dir DATA --threads N --repeat R --json OUT
                            [--parent-pid PID] [--timeout-s S]

DATA is the directory scripts/fetch_text.sh filled. The corpus is the 42 works of
DATA/shakespeare/works.tsv, each read as bytes and decoded as UTF-8: a list of 42 strings,
5,057,198 bytes. Peers:

  tiktoken       a tiktoken.Encoding built offline from DATA/tokenizers/gpt2/{vocab.bpe,
                 encoder.json} with tiktoken's GPT-2 pattern and <|endoftext|> = 50256 (as
                 tests/reference/tokenizer_reference.py builds it);
                 enc.encode_ordinary_batch(texts, num_threads=N)
  sentencepiece  SentencePieceProcessor(model_file=DATA/tokenizers/mistral-v1/tokenizer.model);
                 sp.encode(texts, num_threads=N) (ids, no BOS/EOS), or the texts spread over a
                 thread pool of N where the installed sentencepiece has no num_threads

One untimed warm-up, then R timed runs (time.perf_counter around the whole list); a peer's figure
is the median run: MB/s = corpus bytes / 1e6 / median seconds; cpu_share = the process's CPU
time / (wall time x N) over the timed runs (well under 1: the threads did not all get a core, or
did not run in parallel). Prints one line per peer to stdout and writes OUT:

  {"tiktoken": {"version", "mb_per_s", "tokens", "seconds", "runs", "cpu_share", "method"},
   "sentencepiece": {...}, "bytes": ..., "texts": 42, "threads": N, "repeat": R, "python": ...}

A peer whose package does not import is reported as "skipped: ..." (its JSON entry holds
"skipped") and the others still run; exit status 0. So is a DATA without the corpus. Progress
goes to stderr. The watchdog: the process ends within a second of --parent-pid exiting
(bench/peer_watchdog.py), and after --timeout-s seconds in any case (a traceback of where it hung
goes to stderr, exit status 1).
"""

import argparse
import faulthandler
import inspect
import json
import os
import platform
import statistics
import sys
import time

from peer_watchdog import exit_with_parent

NAME = "tokenizer_bench_peer"


def log(msg):
    print(f"{NAME}: {msg}", file=sys.stderr, flush=True)


def load_corpus(data_dir):
    """(texts, total bytes), or (None, reason)."""
    works = os.path.join(data_dir, "shakespeare", "works.tsv")
    if not os.path.isfile(works):
        return None, f"{works} is missing (run scripts/fetch_text.sh {data_dir})"
    with open(works, encoding="utf-8") as f:
        names = [line.split("\t")[0] for line in f.read().splitlines()[1:] if line]
    texts, total = [], 0
    for name in names:
        with open(os.path.join(data_dir, "shakespeare", name), "rb") as f:
            data = f.read()
        total += len(data)
        texts.append(data.decode("utf-8"))
    return texts, total


def tiktoken_peer(data_dir, threads):
    """(version, encode(texts) -> number of tokens)."""
    import tiktoken
    import tiktoken.load
    from tiktoken_ext.openai_public import r50k_pat_str

    d = os.path.join(data_dir, "tokenizers", "gpt2")
    ranks = tiktoken.load.data_gym_to_mergeable_bpe_ranks(
        vocab_bpe_file=os.path.join(d, "vocab.bpe"),
        encoder_json_file=os.path.join(d, "encoder.json"))
    enc = tiktoken.Encoding(name="gpt2", pat_str=r50k_pat_str, mergeable_ranks=ranks,
                            special_tokens={"<|endoftext|>": 50256}, explicit_n_vocab=50257)

    def encode(texts):
        return sum(map(len, enc.encode_ordinary_batch(texts, num_threads=threads)))

    return tiktoken.__version__, encode, "encode_ordinary_batch(num_threads)"


def sentencepiece_peer(data_dir, threads):
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(
        model_file=os.path.join(data_dir, "tokenizers", "mistral-v1", "tokenizer.model"))
    try:
        has_threads = "num_threads" in inspect.signature(sp.Encode).parameters
    except (TypeError, ValueError):
        has_threads = False
    if has_threads:
        def encode(texts):
            return sum(map(len, sp.encode(texts, num_threads=threads)))
        how = "encode(list, num_threads)"
    else:
        from concurrent.futures import ThreadPoolExecutor
        pool = ThreadPoolExecutor(max_workers=threads)

        def encode(texts):
            return sum(len(ids) for ids in pool.map(sp.encode, texts))
        how = "encode per text over a thread pool"
    return spm.__version__, encode, how


PEERS = {"tiktoken": tiktoken_peer, "sentencepiece": sentencepiece_peer}


def measure(encode, texts, repeat):
    """(tokens, wall seconds of each run, process CPU seconds of all runs)."""
    tokens = encode(texts)  # warm-up
    runs = []
    cpu_start = time.process_time()
    for _ in range(repeat):
        start = time.perf_counter()
        n = encode(texts)
        runs.append(time.perf_counter() - start)
        if n != tokens:
            raise RuntimeError(f"{n} tokens in a timed run, {tokens} in the warm-up")
    return tokens, runs, time.process_time() - cpu_start


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dir", required=True, help="the directory scripts/fetch_text.sh filled")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--json", required=True, help="where the results go")
    p.add_argument("--parent-pid", type=int, default=0,
                   help="end within a second of this process exiting (0: never)")
    p.add_argument("--timeout-s", type=float, default=600,
                   help="end (status 1, with a traceback) after this long; 0: never")
    args = p.parse_args()
    if args.threads < 1 or args.repeat < 1:
        p.error("--threads and --repeat must be at least 1")
    exit_with_parent(args.parent_pid, NAME)
    if args.timeout_s > 0:
        faulthandler.dump_traceback_later(args.timeout_s, exit=True)

    result = {"threads": args.threads, "repeat": args.repeat, "python": platform.python_version()}
    texts, total = load_corpus(args.dir)
    if texts is None:
        print(f"{NAME}: skipped: {total}", flush=True)
        result["skipped"] = total
    else:
        result.update(texts=len(texts), bytes=total)
        log(f"{len(texts)} texts, {total} bytes, {args.threads} thread(s), "
            f"median of {args.repeat} after a warm-up")
        for name, make in PEERS.items():
            try:
                version, encode, how = make(args.dir, args.threads)
            except ImportError as e:
                print(f"{name}: skipped: {e}", flush=True)
                result[name] = {"skipped": str(e)}
                continue
            tokens, runs, cpu_s = measure(encode, texts, args.repeat)
            seconds = statistics.median(runs)
            mb_per_s = total / 1e6 / seconds
            cpu_share = cpu_s / (sum(runs) * args.threads)
            result[name] = {"version": version, "mb_per_s": mb_per_s, "tokens": tokens,
                            "seconds": seconds, "runs": runs, "cpu_share": cpu_share,
                            "method": how}
            print(f"{name} {version}: {mb_per_s:.2f} MB/s, {tokens} tokens, "
                  f"{seconds:.3f} s (median of {args.repeat}), {args.threads} thread(s), "
                  f"cpu share {cpu_share:.2f}, {how}", flush=True)
    with open(args.json, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
