"""A plain training loop a user brings: prints `step N loss X`, never flushes, knows no run dir.

Block-buffered when stdout is a file, unless PYTHONUNBUFFERED is set (the wrapper sets it).
`print_loop.py [STEPS] [INTERVAL]`; stops at STEPS (default: runs for an hour).
"""

import sys
import time

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 36000
interval = float(sys.argv[2]) if len(sys.argv) > 2 else 0.5
print("loading data")
for step in range(1, steps + 1):
    time.sleep(interval)
    print(f"step {step} loss {2.0 / step:.4f}")
