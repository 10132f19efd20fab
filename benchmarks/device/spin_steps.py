"""Steps that keep the GPU busy without arithmetic: each step is one spinning kernel
(torch.cuda._sleep, one thread polling the clock, as an NCCL kernel polls for a peer) then a
sync. NVML reads 100 % busy; the power stays near idle. Prints a step line each time, so the
run is RUNNING and only the GPU words can tell it from real work."""

import time

import torch

CYCLES = 1_000_000_000          # about 0.5 s at the H200's 1980 MHz SM clock
torch.cuda.init()
for step in range(1_000_000):
    t0 = time.monotonic()
    torch.cuda._sleep(CYCLES)
    torch.cuda.synchronize()
    print(f"step {step} loss {1.0 / (step + 1):.4f} step_s {time.monotonic() - t0:.3f}", flush=True)
