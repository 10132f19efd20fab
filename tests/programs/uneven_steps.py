"""A loop whose steps come unevenly: `uneven_steps.py GAP[xCOUNT] ...` prints `step N loss X`
after each gap in turn (`0.4x12` is twelve steps 0.4 s apart), then exits 0. Knows nothing of
dflash-tui."""

import sys
import time

step = 0
print("loading data", flush=True)
for spec in sys.argv[1:]:
    gap, _, count = spec.partition("x")
    for _ in range(int(count or 1)):
        time.sleep(float(gap))
        step += 1
        print(f"step {step} loss {2.0 / step:.4f}", flush=True)
