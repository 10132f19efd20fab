"""A training loop whose host memory grows with its steps, as a leak does: each step keeps
MB_PER_STEP MiB of touched bytes in a list, up to CAP_MB MiB (then it holds them and goes on
flat, so a test never takes the machine's memory); 0 MiB per step is a flat loop.
Prints `step N loss X` every step.

`mem_grow.py MB_PER_STEP [INTERVAL_S] [CAP_MB] [STEPS]`
"""

import sys
import time

mb = float(sys.argv[1])
interval = float(sys.argv[2]) if len(sys.argv) > 2 else 0.1
cap = float(sys.argv[3]) if len(sys.argv) > 3 else 512.0
steps = int(sys.argv[4]) if len(sys.argv) > 4 else 36000
kept = []
held = 0.0
print("loading data", flush=True)
for step in range(1, steps + 1):
    time.sleep(interval)
    if mb > 0 and held + mb <= cap:
        kept.append(bytearray(b"\1" * int(mb * (1 << 20))))   # touched: resident, not only reserved
        held += mb
    print(f"step {step} loss {2.0 / step:.4f}", flush=True)
