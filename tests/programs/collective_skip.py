"""A collective one rank never joins, under torchrun with gloo (CPU).

`python -m torch.distributed.run --standalone --nproc_per_node 2 collective_skip.py`: every rank
all-reduces a tensor for three steps, printing each; then rank 1 goes to write a checkpoint to
a slow disk (it never returns) while the others enter the next all_reduce and wait there for it.
The group's timeout is ten minutes, as a trainer's would be long. Knows nothing of dflash-tui.
"""

import time
from datetime import timedelta

import torch
import torch.distributed as dist


def checkpoint_to_slow_disk() -> None:
    while True:
        time.sleep(3600)


def main() -> None:
    dist.init_process_group("gloo", timeout=timedelta(seconds=600))
    rank = dist.get_rank()
    t = torch.ones(4)
    for step in range(1, 4):
        dist.all_reduce(t)
        print(f"rank {rank} step {step} sum {float(t.sum()):.0f}", flush=True)
    if rank == 1:
        checkpoint_to_slow_disk()
    dist.all_reduce(t)


if __name__ == "__main__":
    main()
