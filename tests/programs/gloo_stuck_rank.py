"""A torch.distributed (gloo, CPU) loop under torchrun in which one rank stops joining.

`gloo_stuck_rank.py MODE`: every rank all-reduces a few steps, then
  hang   rank 1 goes into checkpoint_to_slow_disk for good; rank 0 waits in all_reduce
  crash  rank 1 raises in load_shard; its entrypoint is torchelastic's @record, so its error
         file holds the traceback (torchrun's "root cause")
"""

import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record

STEPS_BEFORE = 3


def checkpoint_to_slow_disk():
    while True:
        time.sleep(0.1)


def load_shard(rank):
    raise ValueError(f"shard {rank} is corrupt")


@record
def main():
    mode = sys.argv[1]
    dist.init_process_group("gloo", timeout=timedelta(seconds=600))
    rank = dist.get_rank()
    x = torch.ones(8)
    for step in range(STEPS_BEFORE):
        dist.all_reduce(x)
        print(f"rank {rank} step {step}", flush=True)
    if rank == 1:
        if mode == "crash":
            time.sleep(0.5)
            load_shard(rank)
        checkpoint_to_slow_disk()
    dist.all_reduce(x)
    time.sleep(600)


if __name__ == "__main__":
    main()
