"""Ends a benchmark's PyTorch peer when the benchmark that started it has exited.

gpt_bench and ddp_bench start their peers through a pipe and read the result at the end; a bench
stopped by a signal leaves nobody to read it, so its peer should not run on for minutes:

    from peer_watchdog import exit_with_parent
    exit_with_parent(args.parent_pid, "gpt_bench_torch")            # at start-up
    exit_with_parent(args.parent_pid, "ddp_bench_torch", children)  # children: processes to kill
"""

import os
import sys
import threading
import time


def exit_with_parent(parent_pid, name, children=()):
    """Within a second of `parent_pid` exiting, kills the live processes in `children` (a list
    that may still grow) and ends this process. Does nothing for parent_pid <= 0."""
    if parent_pid <= 0:
        return

    def watch():
        while True:
            time.sleep(1.0)
            try:
                os.kill(parent_pid, 0)
            except ProcessLookupError:
                break
            except PermissionError:
                pass  # alive, someone else's (the pid was reused): keep watching
        for proc in list(children):
            if proc.is_alive():
                proc.kill()
        print(f"{name}: parent {parent_pid} exited; stopping", file=sys.stderr, flush=True)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()
