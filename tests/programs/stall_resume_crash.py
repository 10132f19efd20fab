"""A run that stalls, recovers, then crashes: progress lines, then idle silence (no output, no
CPU) for SILENT seconds (argv[1]), RESUMED more steps of 0.2 s (argv[2]), then an exception
(traceback on stderr, exit 1)."""

import sys
import time

silent_s = float(sys.argv[1]) if len(sys.argv) > 1 else 6.0
resumed = int(sys.argv[2]) if len(sys.argv) > 2 else 20
step = 0


def steps(n):
    global step
    for _ in range(n):
        step += 1
        print(f"step {step} loss {1.0 / step:.3f}", flush=True)
        time.sleep(0.2)


steps(8)
time.sleep(silent_s)          # a dead data loader: no output, no CPU
steps(resumed)


def all_reduce(grads):
    raise RuntimeError(f"NCCL error: unhandled system error (step {step}, {len(grads)} grads)")


all_reduce([0.0] * 3)
