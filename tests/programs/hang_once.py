"""A program of a user's own that resumes from its own checkpoint file: progress lines ("step N
loss x", one every STEP_S seconds, argv[4], default 0.2) up to TOTAL steps (argv[2]), the step
written to CHECKPOINT (argv[1])
after each one; on a first launch (DFLASH_RESTART=0) it hangs at step HANG_AT (argv[3]): no
output, no CPU, until it is stopped. A relaunch (DFLASH_RESTART >= 1) continues from the file."""

import os
import sys
import time
from pathlib import Path

checkpoint = Path(sys.argv[1])
total = int(sys.argv[2]) if len(sys.argv) > 2 else 20
hang_at = int(sys.argv[3]) if len(sys.argv) > 3 else 6
step_s = float(sys.argv[4]) if len(sys.argv) > 4 else 0.2
restart = int(os.environ.get("DFLASH_RESTART", "-1"))
step = int(checkpoint.read_text()) if checkpoint.exists() else 0
print(f"DFLASH_RESTART={restart}: starting at step {step}", flush=True)
while step < total:
    if restart == 0 and step == hang_at:
        time.sleep(3600)          # a dead data loader: silent, idle
    step += 1
    print(f"step {step} loss {1.0 / step:.3f}", flush=True)
    tmp = checkpoint.with_suffix(".tmp")
    tmp.write_text(str(step))
    tmp.replace(checkpoint)
    time.sleep(step_s)
print(f"finished {total} steps", flush=True)
