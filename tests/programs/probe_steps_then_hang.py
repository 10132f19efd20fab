"""Steps that reach only events.jsonl (the run probe's one-line API, nothing printed), then a
hang: STEPS steps every STEP_S seconds, then it waits on an event nobody sets.

`probe_steps_then_hang.py [STEPS] [STEP_S]` (defaults 14, 1.0)
"""

import sys
import threading
import time

import dflash_probe

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 14
step_s = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
for step in range(1, steps + 1):
    time.sleep(step_s)
    dflash_probe.log(step=step, loss=1.0 / step)
threading.Event().wait()
