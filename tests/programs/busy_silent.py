"""Two steps, then a phase that burns CPU and prints nothing (data preparation, a long compile).

`busy_silent.py [SECONDS]`: after SECONDS of silence (default: forever) it prints steps again.
"""

import sys
import time

quiet = float(sys.argv[1]) if len(sys.argv) > 1 else 1e9
print("step 1 loss 1.00")
print("step 2 loss 0.90")
t0 = time.monotonic()
x = 0
while time.monotonic() - t0 < quiet:
    x += 1
for step in range(3, 100000):
    print(f"step {step} loss {1.0 / step:.3f}")
    time.sleep(0.2)
