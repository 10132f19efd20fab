"""A loop that steps at a steady pace, then hangs for good, waiting on a queue no one feeds.

`steps_then_hang.py HANG_AT INTERVAL`: prints `step N loss X` every INTERVAL seconds up to step
HANG_AT, then blocks in `queue.get()`. Knows nothing of dflash-tui.
"""

import queue
import sys
import time

hang_at = int(sys.argv[1])
interval = float(sys.argv[2])
print("loading data")
for step in range(1, hang_at + 1):
    time.sleep(interval)
    print(f"step {step} loss {2.0 / step:.4f}")
queue.Queue().get()
