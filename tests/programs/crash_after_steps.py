"""A few steps, then an exception, as a user's script dies (traceback on stderr, exit 1)."""

import sys
import time

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 5
for step in range(1, steps + 1):
    print(f"step {step} loss {1.0 / step:.3f}")
    time.sleep(0.2)


def forward(batch):
    raise ValueError(f"shape mismatch in batch {batch}: expected [8, 512], got [8, 511]")


forward(steps + 1)
