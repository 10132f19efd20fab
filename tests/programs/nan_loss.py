"""A training loop whose loss turns NaN and keeps stepping, as a diverged run does.

`nan_loss.py FORM [NAN_AT] [STEPS] [INTERVAL]`: FORM "plain" prints `loss X`, "steps" prints
`step N/STEPS loss X`; from step NAN_AT (default 20) on the loss is `nan`. Knows nothing of
dflash-tui.
"""

import math
import sys
import time

form = sys.argv[1]
nan_at = int(sys.argv[2]) if len(sys.argv) > 2 else 20
steps = int(sys.argv[3]) if len(sys.argv) > 3 else 5000
interval = float(sys.argv[4]) if len(sys.argv) > 4 else 0.05
for step in range(1, steps + 1):
    loss = float("nan") if step >= nan_at else 2.0 / math.sqrt(step) + 0.15
    if form == "plain":
        print(f"loss {loss:.4f}", flush=True)
    else:
        print(f"step {step}/{steps} loss {loss:.4f}", flush=True)
    time.sleep(interval)
