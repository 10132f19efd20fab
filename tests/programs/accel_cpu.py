"""A tiny real Hugging Face Accelerate program on CPU: `accelerate launch --cpu accel_cpu.py [SECONDS]`.

Prepares a linear model and its optimizer with `Accelerator`, then trains it on random data,
one step every 0.2 s for SECONDS (default 8), printing each step. Knows nothing of dflash-tui.
"""

import sys
import time

import torch
from accelerate import Accelerator


def train(seconds: float) -> None:
    accelerator = Accelerator(cpu=True)
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    model, optimizer = accelerator.prepare(model, optimizer)
    deadline = time.monotonic() + seconds
    step = 0
    while time.monotonic() < deadline:
        x = torch.randn(16, 8)
        loss = (model(x) - x.sum(dim=1, keepdim=True)).pow(2).mean()
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        step += 1
        print(f"step {step} loss {loss.item():.3f} process {accelerator.process_index}", flush=True)
        time.sleep(0.2)


if __name__ == "__main__":
    train(float(sys.argv[1]) if len(sys.argv) > 1 else 8.0)
