"""torchrun, gloo on CPU: every rank all-reduces a step each STEP_S seconds; after STEPS steps,
rank ODD_RANK waits on a queue that is never fed, and the other ranks wait for it in all_reduce.

`ranks_one_odd.py [STEPS] [STEP_S] [ODD_RANK]` (defaults 6, 0.5, 2)
"""

import os
import queue
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist


def next_batch(batches: "queue.Queue[int]") -> int:
    return batches.get()        # the loader that feeds it was never started


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 6
    step_s = float(sys.argv[2]) if len(sys.argv) > 2 else 0.5
    odd = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    dist.init_process_group("gloo", timeout=timedelta(seconds=600))
    rank = dist.get_rank()
    x = torch.ones(8)
    batches: "queue.Queue[int]" = queue.Queue()
    for step in range(1, 10**9):
        if step > steps and rank == odd:
            next_batch(batches)
        time.sleep(step_s)
        dist.all_reduce(x)
        if rank == 0:
            print(f"step {step} loss {1.0 / step:.4f}", flush=True)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
