"""A training loop that saves a torch.save checkpoint every few steps, until its disk is full.

`save_loop.py OUT STEPS SAVE_EVERY STEP_S KIB`: STEPS steps of STEP_S seconds each; every
SAVE_EVERY steps a checkpoint of about KIB KiB (a tensor of random floats and the step) is
saved to OUT/step-N.pt with torch.save, as a program knowing nothing of dflash-tui does. A
save that finds the disk full ends it with the OSError's traceback.
"""

import os
import sys
import time

import torch

out, steps, save_every, step_s, kib = (sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]),
                                       int(sys.argv[5]))
os.makedirs(out, exist_ok=True)
weights = torch.randn(kib * 256)          # 4 bytes each
for step in range(1, steps + 1):
    time.sleep(step_s)
    weights.mul_(0.999)
    print(f"step {step}/{steps} loss {1.0 / step:.4f}", flush=True)
    if step % save_every == 0:
        torch.save({"weights": weights, "step": step}, os.path.join(out, f"step-{step}.pt"))
        print(f"checkpoint: step {step} saved to {out}/step-{step}.pt", flush=True)
