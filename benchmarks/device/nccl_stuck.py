"""One NCCL rank (torchrun, world size 1) whose collective never completes: the barrier is
queued behind a GPU kernel that never returns, so the rank waits in dist.barrier until NCCL's
watchdog times out (after TIMEOUT_S) and torch dumps its Flight Recorder."""

import os
from datetime import timedelta

import torch
import torch.distributed as dist

TIMEOUT_S = int(os.environ.get("NCCL_STUCK_TIMEOUT_S", "45"))

torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
dist.init_process_group("nccl", timeout=timedelta(seconds=TIMEOUT_S))
x = torch.ones(1 << 20, device="cuda")
for step in range(5):
    dist.all_reduce(x)
    torch.cuda.synchronize()
    print(f"step {step} all_reduce ok", flush=True)
torch.cuda._sleep(1 << 50)
dist.barrier()
print("never here", flush=True)
