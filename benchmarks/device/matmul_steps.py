"""Steps of real arithmetic: bf16 8192^3 matrix products (about 790 TFLOP/s on an H200), 40 a
step, then a sync. NVML reads 100 % busy and the power goes to the board's limit."""

import time

import torch

a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
for step in range(1_000_000):
    t0 = time.monotonic()
    for _ in range(40):
        c = a @ b
    torch.cuda.synchronize()
    print(f"step {step} loss {float(c[0, 0]) * 0:.4f} step_s {time.monotonic() - t0:.3f}", flush=True)
