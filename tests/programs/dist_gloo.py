"""A tiny real torch.distributed program: CPU gloo all-reduces from a named thread of each rank.

`torchrun --standalone --nproc_per_node 2 dist_gloo.py [SECONDS]`: every rank joins the gloo
group, then its thread "allreduce-loop" sums a tensor across ranks every 0.2 s for SECONDS
(default 8), printing each rank's running total. Knows nothing of dflash-tui.
"""

import os
import sys
import threading
import time

import torch
import torch.distributed as dist


def allreduce_loop(seconds: float, rank: int) -> None:
    t = torch.ones(4)
    deadline = time.monotonic() + seconds
    step = 0
    while time.monotonic() < deadline:
        dist.all_reduce(t)
        t /= dist.get_world_size()
        step += 1
        print(f"rank {rank} step {step} total {float(t.sum()):.1f}", flush=True)
        time.sleep(0.2)


def main() -> int:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 8.0
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    worker = threading.Thread(target=allreduce_loop, args=(seconds, rank), name="allreduce-loop")
    worker.start()
    worker.join()
    dist.barrier()
    dist.destroy_process_group()
    print(f"rank {rank} of {os.environ.get('WORLD_SIZE')} done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
