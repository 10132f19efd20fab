"""The recovery benchmark's program (benchmarks/recovery_cost.py): a step every STEP_S seconds
(argv[3], default 0.5), each written to the log ("step N loss x") and, with its own wall time,
to STEPS (argv[2], "restart step time" lines), the step kept in CHECKPOINT (argv[1]). On a
first launch (DFLASH_RESTART=0) it hangs after step HANG_AT (argv[4], default 5): silent, idle,
until it is stopped. A relaunch continues from the checkpoint, to TOTAL (argv[5], default 12)."""

import os
import sys
import time
from pathlib import Path

checkpoint, steps = Path(sys.argv[1]), Path(sys.argv[2])
step_s = float(sys.argv[3]) if len(sys.argv) > 3 else 0.5
hang_at = int(sys.argv[4]) if len(sys.argv) > 4 else 5
total = int(sys.argv[5]) if len(sys.argv) > 5 else 12
restart = int(os.environ.get("DFLASH_RESTART", "0"))
step = int(checkpoint.read_text()) if checkpoint.exists() else 0
print(f"DFLASH_RESTART={restart}: starting at step {step}", flush=True)
while step < total:
    if restart == 0 and step == hang_at:
        time.sleep(3600)
    time.sleep(step_s)
    step += 1
    print(f"step {step} loss {1.0 / step:.3f}", flush=True)
    with steps.open("a") as f:
        f.write(f"{restart} {step} {time.time():.3f}\n")
    checkpoint.write_text(str(step))
print(f"finished {total} steps", flush=True)
