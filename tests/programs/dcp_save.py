"""torch.distributed.checkpoint.save on the CPU, in one process with no process group.

`dcp_save.py OUT SAVES [EVERY_S]`: a small model's state saved SAVES times, as step_10, step_20,
... folders of OUT (each a DCP checkpoint: *.distcp files and the .metadata renamed into place
last), EVERY_S seconds apart (default 0.2). Knows nothing of dflash-tui.
"""

import os
import sys
import time

import torch
import torch.distributed.checkpoint as dcp

out, saves = sys.argv[1], int(sys.argv[2])
every_s = float(sys.argv[3]) if len(sys.argv) > 3 else 0.2

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
for i in range(1, saves + 1):
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.01)
    dcp.save({"model": model.state_dict()}, checkpoint_id=os.path.join(out, f"step_{i * 10}"))
    print(f"step {i * 10}: saved", flush=True)
    time.sleep(every_s)
