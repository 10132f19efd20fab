"""Light real work: a few small bf16 matrix products a step, then a sync and a pause, so the
GPU is mostly idle and its power low. Run beside spin_steps.py (another program spinning on the
same GPU) it is the run whose view must not take the other's spinning for its own."""

import time

import torch

a = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
for step in range(1_000_000):
    t0 = time.monotonic()
    for _ in range(5):
        c = a @ a
    torch.cuda.synchronize()
    time.sleep(0.3)
    print(f"step {step} loss {float(c[0, 0]) * 0:.4f} step_s {time.monotonic() - t0:.3f}", flush=True)
