"""torchrun, gloo on CPU: every rank works WORK_S a step (a stand-in for its forward and
backward), rank SLOW_RANK EXTRA_S more, then all all-reduce; the others wait for it there.

`gloo_straggler.py [WORK_S] [EXTRA_S] [SLOW_RANK]` (defaults 0.2, 0.6, 1)
"""

import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist


def forward_backward(seconds: float) -> None:
    time.sleep(seconds)


def main() -> None:
    work = float(sys.argv[1]) if len(sys.argv) > 1 else 0.2
    extra = float(sys.argv[2]) if len(sys.argv) > 2 else 0.6
    slow = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    dist.init_process_group("gloo", timeout=timedelta(seconds=600))
    rank = dist.get_rank()
    x = torch.ones(8)
    for step in range(1, 10**9):
        forward_backward(work + (extra if rank == slow else 0.0))
        dist.all_reduce(x)
        if rank == 0:
            print(f"step {step} loss {1.0 / step:.4f}", flush=True)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
