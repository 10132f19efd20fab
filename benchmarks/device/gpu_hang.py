"""A GPU kernel that never returns, as a stuck NCCL collective looks from the host: a spinning
kernel (torch.cuda._sleep) the only thread then waits for in torch.cuda.synchronize."""

import torch

x = torch.ones(1024, device="cuda")
for step in range(3):
    x = x * 2
    torch.cuda.synchronize()
    print(f"step {step} loss {1.0 / (step + 1):.3f}", flush=True)
torch.cuda._sleep(1 << 50)      # ~days of GPU clock cycles
torch.cuda.synchronize()
