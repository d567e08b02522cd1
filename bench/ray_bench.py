#!/usr/bin/env python3
"""Ray's side of cluster_bench: the same cases, written as Ray users write them.

    ray_bench.py [--workers 2] [--cpus-per-worker 2] [--calls 1000] [--big-calls 100]
                 [--window 64] [--fan 4] [--pairs 2] [--spawn 8] [--groups 8]
                 [--repeat 3] [--cases sync_int64,...]

Starts a local Ray instance with workers * cpus-per-worker CPUs (ray.init),
runs every case once to warm up and then --repeat times, and prints one JSON
object on stdout: the median rate of each case under the key cluster_bench
uses, and ray_version. Everything else goes to stderr.

Choices (see docs/benchmarks.md):
- Every actor is created with num_cpus=0, so that any number fit, as troupe's
  actors hold no resources by default. Ray runs each actor in a process of its own.
- Async windows are batches: submit `window` calls, then ray.get the list.
- N:N: N "caller" actors, each calling its own callee actor with the same
  windows; the driver starts them all and waits for all (a threaded Python
  driver would measure the GIL rather than Ray).
- Spawn: create all the actors, then ray.get the first call of each (Ray
  starts actors asynchronously); they are killed after the clock stops.
"""

import argparse
import json
import os
import statistics
import sys
import time

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import ray  # noqa: E402
from ray.util.placement_group import placement_group, remove_placement_group  # noqa: E402

try:
    import numpy as np
except ImportError:  # bytes are a fine argument too, copied on receipt
    np = None


@ray.remote(num_cpus=0)
class Echo:
    def ping(self, x):
        return x

    def size(self, s):
        return len(s)

    def bytes(self, b):
        return len(b)


@ray.remote(num_cpus=0)
class Caller:
    def __init__(self, callee):
        self.callee = callee

    def run(self, n, window):
        done = 0
        while done < n:
            k = min(window, n - done)
            ray.get([self.callee.ping.remote(done + i) for i in range(k)])
            done += k
        return done


def windows(n, window, target):
    done = 0
    while done < n:
        k = min(window, n - done)
        ray.get([target(done + i).ping.remote(done + i) for i in range(k)])
        done += k


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--cpus-per-worker", type=int, default=2)
    p.add_argument("--calls", type=int, default=1000)
    p.add_argument("--big-calls", type=int, default=100)
    p.add_argument("--window", type=int, default=64)
    p.add_argument("--fan", type=int, default=4)
    p.add_argument("--pairs", type=int, default=2)
    p.add_argument("--spawn", type=int, default=8)
    p.add_argument("--groups", type=int, default=8)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--cases", default="", help="comma-separated case keys (default: all)")
    a = p.parse_args()

    ray.init(num_cpus=a.workers * a.cpus_per_worker, include_dashboard=False,
             log_to_driver=False, logging_level="ERROR")
    n_echoes = max(a.workers, a.fan, a.pairs)
    echoes = [Echo.remote() for _ in range(n_echoes)]
    ray.get([e.ping.remote(0) for e in echoes])
    callers = [Caller.remote(echoes[i]) for i in range(a.pairs)]
    ray.get([c.run.remote(1, 1) for c in callers])
    payload_1k = "x" * 1024
    big = np.full(1 << 20, 7, dtype=np.uint8) if np is not None else bytes(1 << 20)

    def timed(ops, run):
        start = time.perf_counter()
        run()
        return ops / (time.perf_counter() - start)

    def sync_calls(n, call):
        for i in range(n):
            ray.get(call(i))

    def groups(n):
        for _ in range(n):
            pg = placement_group([{"CPU": 1}, {"CPU": 1}], strategy="PACK")
            ray.get(pg.ready())
            remove_placement_group(pg)

    def spawn_rate(n):
        start = time.perf_counter()
        actors = [Echo.remote() for _ in range(n)]
        ray.get([x.ping.remote(i) for i, x in enumerate(actors)])
        elapsed = time.perf_counter() - start
        for x in actors:
            ray.kill(x)
        return n / elapsed

    e0 = echoes[0]
    n, w = a.calls, a.window

    def measure(key, warm):
        """One measurement of case `key`: its rate. A warm-up (warm=True)
        spawns and creates only a couple: those cases are slow."""
        if key == "spawn":
            return spawn_rate(min(a.spawn, 2) if warm else a.spawn)
        if key == "groups":
            k = min(a.groups, 2) if warm else a.groups
            return timed(k, lambda: groups(k))
        if key == "sync_int64":
            return timed(n, lambda: sync_calls(n, lambda i: e0.ping.remote(i)))
        if key == "sync_1k":
            return timed(n, lambda: sync_calls(n, lambda i: e0.size.remote(payload_1k)))
        if key == "sync_1m":
            k = a.big_calls
            return timed(k, lambda: sync_calls(k, lambda i: e0.bytes.remote(big)))
        if key == "async_int64":
            return timed(n, lambda: windows(n, w, lambda i: e0))
        if key == "fan_out":
            return timed(n, lambda: windows(n, w, lambda i: echoes[i % a.fan]))
        if key == "pairs":
            return timed(n * a.pairs, lambda: ray.get([c.run.remote(n, w) for c in callers]))
        raise ValueError(key)

    # In cluster_bench's order.
    cases = ["sync_int64", "sync_1k", "sync_1m", "async_int64", "fan_out", "pairs", "groups",
             "spawn"]
    wanted = [k for k in a.cases.split(",") if k] or list(cases)
    results = {}
    for key in cases:
        if key not in wanted:
            continue
        measure(key, warm=True)
        results[key] = statistics.median(measure(key, warm=False) for _ in range(a.repeat))
        print(f"ray: {key} {results[key]:.4g}/s", file=sys.stderr, flush=True)
    results["ray_version"] = ray.__version__
    ray.shutdown()
    print(json.dumps(results), flush=True)


if __name__ == "__main__":
    main()
